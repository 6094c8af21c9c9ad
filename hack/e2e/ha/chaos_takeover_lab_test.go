//go:build lab

package ha

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
)

// takeoverKind is one way the leader goes: how it is made to go, and how it is brought
// back.
type takeoverKind struct {
	name string
	goal time.Duration
	// fault makes leader i go; it is called at the takeover's start.
	fault func(c *chaosLab, t labtest.T, i int)
	// restore starts again what fault stopped.
	restore func(c *chaosLab, t labtest.T, i int)
}

var takeoverKinds = []takeoverKind{
	{
		name: "graceful stop (SIGTERM: it resigns)", goal: 2 * time.Second,
		fault:   func(c *chaosLab, t labtest.T, i int) { require.NoError(t, c.s.StopReplica(t.Context(), i)) },
		restore: func(c *chaosLab, t labtest.T, i int) { require.NoError(t, c.s.StartReplica(t.Context(), i)) },
	},
	{
		name: "SIGKILL of the leader", goal: leaderTTL + 5*time.Second,
		fault:   func(c *chaosLab, t labtest.T, i int) { require.NoError(t, c.s.KillReplica(t.Context(), i)) },
		restore: func(c *chaosLab, t labtest.T, i int) { require.NoError(t, c.s.StartReplica(t.Context(), i)) },
	},
	{
		name: "host down (provider, etcd member, keepalived)", goal: leaderTTL + 5*time.Second,
		fault: func(c *chaosLab, t labtest.T, i int) {
			// SIGKILL to all three first, then each is waited for.
			if err := syscall.Kill(c.s.Replicas[i].PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				require.NoError(t, err)
			}

			if pid := c.s.Etcd().Pid(i); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}

			require.NoError(t, c.s.KillKeepalived(t.Context(), i))
			require.NoError(t, c.s.Etcd().Kill(i))
			require.NoError(t, c.s.KillReplica(t.Context(), i))
		},
		restore: func(c *chaosLab, t labtest.T, i int) {
			require.NoError(t, c.s.Etcd().Restart(t.Context(), i))
			require.NoError(t, c.s.StartReplica(t.Context(), i))
			require.NoError(t, c.s.StartKeepalived(i, apiPort))
		},
	},
}

// takeoverReps is how many times each kind is measured: 20, or $ANVIL_CHAOS_REPS.
func takeoverReps() int {
	if n, err := strconv.Atoi(os.Getenv("ANVIL_CHAOS_REPS")); err == nil && n > 0 {
		return n
	}

	return 20
}

// takeovers measures, for each kind, the time from the leader's going to another
// replica's "elected leader" (its log's time), takeoverReps times; the site is made
// whole between repetitions.
func (c *chaosLab) takeovers(t labtest.T) {
	reps := takeoverReps()
	section := fmt.Sprintf("1. Takeover: leader gone → another replica's \"elected leader\" (lease TTL %s, %d repetitions each)", leaderTTL, reps)

	c.fig.Add(section, "%-48s %8s %8s %8s %8s   %s", "kind", "min", "median", "max", "goal", "max within goal")

	for _, k := range takeoverKinds {
		var times []time.Duration

		raftLeaders := 0

		for rep := range reps {
			c.waitWhole(t, k.name)

			leader := waitLeader(t, c.s, -1)
			raft, _ := c.s.Etcd().Leader(t.Context())
			marks := c.markLogs()

			start := time.Now()
			k.fault(c, t, leader)

			next, at := elected(t, marks, leader, 2*time.Minute)
			d := at.Sub(start)
			times = append(times, d)

			if raft == leader {
				raftLeaders++
			}

			c.logf(t, "%s #%d: r%d gone → r%d elected after %s (etcd raft leader: member %d)", k.name, rep+1, leader, next, secs(d), raft)

			k.restore(c, t, leader)
		}

		lo, median, hi := durations(times)
		c.fig.Add(section, "%-48s %8s %8s %8s %8s   %v", k.name, secs(lo), secs(median), secs(hi), "≤ "+secs(k.goal), hi <= k.goal)

		if k.name == takeoverKinds[2].name {
			c.fig.Add(section, "  (host down: the etcd member killed was the raft leader in %d of %d)", raftLeaders, reps)
		}
	}

	c.waitWhole(t, "the takeovers")
}
