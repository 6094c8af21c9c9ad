package maintenance

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"go.uber.org/zap"
)

// relistenWait is the pause before binding the API again after its listener failed.
const relistenWait = 2 * time.Second

// Follow keeps the API listening on the machine's current SideroLink address, and on no
// other, until ctx is done: each address received moves it there, the zero address stops
// it (SideroLink's OnAddress sends exactly these).
func (s *Server) Follow(ctx context.Context, addresses <-chan netip.Addr) {
	var (
		stop func()
		done chan struct{}
	)

	halt := func() {
		if stop != nil {
			stop()
			<-done
			stop = nil
		}
	}

	defer halt()

	for {
		var addr netip.Addr

		select {
		case <-ctx.Done():
			return
		case addr = <-addresses:
		}

		halt()

		if !addr.IsValid() || addr.IsUnspecified() {
			continue
		}

		serveCtx, cancel := context.WithCancel(ctx)
		stop, done = cancel, make(chan struct{})

		go func() {
			defer close(done)

			s.serveOn(serveCtx, addr)
		}()
	}
}

// serveOn serves the API on [addr]:50000 until ctx is done, binding again after a
// failure (the address may still be settling on the link).
func (s *Server) serveOn(ctx context.Context, addr netip.Addr) {
	for ctx.Err() == nil {
		lis, err := Listen(ctx, addr)
		if err == nil {
			err = s.Serve(ctx, lis)
		}

		if err != nil && !errors.Is(err, context.Canceled) {
			s.logger.Warn("maintenance API: listening again", zap.Stringer("address", addr), zap.Error(err))
		}

		select {
		case <-ctx.Done():
		case <-time.After(relistenWait):
		}
	}
}

// Addresses returns a channel for Follow and the function that sends on it, to be given
// to SideroLink as its OnAddress: only the newest address matters, so a send replaces
// one not taken yet and never blocks.
func Addresses() (<-chan netip.Addr, func(netip.Addr)) {
	ch := make(chan netip.Addr, 1)

	return ch, func(addr netip.Addr) {
		select {
		case <-ch:
		default:
		}

		ch <- addr
	}
}
