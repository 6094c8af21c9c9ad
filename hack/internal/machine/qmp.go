package machine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// QMP runs one QMP command on the machine's monitor socket: a connection per command,
// since commands are rare and QEMU serves one monitor client at a time.
func (m *Machine) QMP(ctx context.Context, command string) error {
	var d net.Dialer

	conn, err := d.DialContext(ctx, "unix", m.QMPSocket())
	if err != nil {
		return fmt.Errorf("error connecting to the QMP socket of %s: %w", m.Name, err)
	}

	defer conn.Close()

	deadline := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}

	if err := conn.SetDeadline(deadline); err != nil {
		return fmt.Errorf("error setting the QMP deadline: %w", err)
	}

	r := bufio.NewReader(conn)

	// The greeting, then capabilities negotiation, then the command.
	if _, err := readReply(r, true); err != nil {
		return fmt.Errorf("QMP greeting of %s: %w", m.Name, err)
	}

	for _, cmd := range []string{"qmp_capabilities", command} {
		if err := json.NewEncoder(conn).Encode(map[string]string{"execute": cmd}); err != nil {
			return fmt.Errorf("error sending QMP %s: %w", cmd, err)
		}

		if _, err := readReply(r, false); err != nil {
			if cmd == "quit" {
				return nil // QEMU may close the socket before it answers
			}

			return fmt.Errorf("QMP %s on %s: %w", cmd, m.Name, err)
		}
	}

	return nil
}

type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Event  string          `json:"event"`
	Error  *struct {
		Class, Desc string
	} `json:"error"`
}

// readReply reads messages until the greeting (greeting) or a command's answer,
// skipping events.
func readReply(r *bufio.Reader, greeting bool) (*qmpMessage, error) {
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("error reading QMP: %w", err)
		}

		var msg qmpMessage
		if err := json.Unmarshal(line, &msg); err != nil {
			return nil, fmt.Errorf("error decoding QMP %q: %w", line, err)
		}

		switch {
		case msg.Error != nil:
			return nil, fmt.Errorf("%s: %s", msg.Error.Class, msg.Error.Desc)
		case greeting && msg.QMP != nil, !greeting && msg.Return != nil:
			return &msg, nil
		}
	}
}
