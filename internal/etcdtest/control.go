package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// Pid is member i's process ID, 0 while it does not run.
func (c *Cluster) Pid(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()

	if m := c.members[i]; m.child != nil {
		return m.child.Pid()
	}

	return 0
}

// Kill kills member i with SIGKILL and waits until it has exited.
func (c *Cluster) Kill(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	m := c.members[i]
	if m.child == nil {
		return fmt.Errorf("%s does not run", m.name)
	}

	m.stop(0)

	return nil
}

// Restart starts member i again, killed or exited, on its data dir, and waits (bounded
// by ctx and 60 s) until it answers and knows the leader: it has rejoined.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()

	m := c.members[i]
	if m.child != nil {
		if exited, _ := m.child.Exited(); exited {
			m.stop(0) // reaps it and closes its log
		}
	}

	if m.child != nil {
		c.mu.Unlock()

		return fmt.Errorf("%s runs already", m.name)
	}

	err := c.startMember(m, "existing")

	c.mu.Unlock()

	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	return c.waitMember(ctx, i)
}

// Freeze stops member i with SIGSTOP: it runs, holds its sockets and answers nothing.
func (c *Cluster) Freeze(i int) error { return c.setFrozen(i, true) }

// Thaw lets a frozen member i go on (SIGCONT).
func (c *Cluster) Thaw(i int) error { return c.setFrozen(i, false) }

func (c *Cluster) setFrozen(i int, frozen bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	m := c.members[i]

	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}

	if err := m.signal(sig); err != nil {
		return err
	}

	m.frozen = frozen

	return nil
}

// Leader is the index of the raft leader, as the running, unfrozen members see it. It is
// an error when none answers or they do not agree (during an election): ask again.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	c.mu.Lock()

	admin := c.admin

	var asked []*member

	for _, m := range c.members {
		if m.child == nil || m.frozen {
			continue
		}

		if exited, _ := m.child.Exited(); !exited {
			asked = append(asked, m)
		}
	}

	index := make(map[uint64]int, len(c.members))
	for i, m := range c.members {
		index[m.id] = i
	}

	c.mu.Unlock()

	switch {
	case admin == nil:
		return -1, errors.New("the cluster is stopped")
	case len(asked) == 0:
		return -1, errors.New("no member runs unfrozen")
	}

	var (
		leader uint64
		errs   []error
	)

	for _, m := range asked {
		sctx, cancel := context.WithTimeout(ctx, callTimeout)
		st, err := admin.Status(sctx, m.clientURL())

		cancel()

		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
		case st.Leader == 0:
			return -1, fmt.Errorf("%s knows no leader", m.name)
		case leader != 0 && st.Leader != leader:
			return -1, fmt.Errorf("members disagree on the leader (%x, %x)", leader, st.Leader)
		default:
			leader = st.Leader
		}
	}

	if leader == 0 {
		return -1, fmt.Errorf("no member answered: %w", errors.Join(errs...))
	}

	i, ok := index[leader]
	if !ok {
		return -1, fmt.Errorf("the leader %x is no member the cluster started with", leader)
	}

	return i, nil
}
