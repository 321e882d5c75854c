package fn

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Error is a handler's failure as Cairn records it: a message for people, a
// short machine-readable code, and whether another attempt may succeed.
// Return one from a handler (Terminal, Retryable); any other error is
// retryable with code "failed".
type Error struct {
	// Code is a short class of the failure ("bad_input", "declined").
	Code string `json:"code,omitempty"`
	// Message says what failed.
	Message string `json:"message"`
	// Retryable is false for a failure no retry can fix: the step fails at once.
	Retryable bool `json:"retryable"`
	// RetryAfter, when > 0, is the earliest retry the function asks for (sent
	// as Retry-After by the http adapter; exec and lambda have no such channel).
	RetryAfter time.Duration `json:"-"`
}

// Error returns the code and message.
func (e *Error) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// Terminal returns an *Error that Cairn does not retry.
func Terminal(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Retryable returns an *Error that Cairn retries under the step's retry policy.
func Retryable(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: true}
}

// asError turns what a handler returned into an *Error: its own, or a
// retryable one (code "failed") for any other error.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		if e.Message == "" {
			c := *e
			c.Message = "the handler failed without a message"
			return &c
		}
		return e
	}
	return &Error{Code: "failed", Message: err.Error(), Retryable: true}
}

// jsonText is the error as Cairn reads it from an exec control message, a
// Lambda errorMessage or an http error body: {"message", "code", "retryable"}.
func (e *Error) jsonText() []byte {
	b, _ := json.Marshal(e) // a struct of strings and a bool: cannot fail
	return b
}
