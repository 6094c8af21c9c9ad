package initsys

import (
	"fmt"
	"runtime/debug"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// PanicError is what Guard returns when fn panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap lets errors.Is see through a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)

	return err
}

// Guard runs fn and turns a panic in it into a *PanicError, logging the
// value and stack first. PID 1 exiting panics the kernel, so the agent runs
// its work under Guard. It covers fn's goroutine only: goroutines fn starts
// need their own Guard.
func Guard(logger *zap.Logger, fn func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}

		stack := debug.Stack()
		err = &PanicError{Value: r, Stack: stack}

		if logger == nil {
			return
		}

		// The stack goes in the entry's stack field so the console
		// encoder prints it as lines, not as one escaped string.
		if ce := logger.Check(zapcore.ErrorLevel, "recovered from panic"); ce != nil {
			ce.Stack = string(stack)
			ce.Write(zap.String("panic", fmt.Sprint(r)))
		}
	}()

	return fn()
}
