package fn

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// Stream is an output written as it is produced: Write is given the output's
// writer (exec's stdout, the http response) and nothing holds the output whole.
// Return one from a handler for outputs of any size.
type Stream struct {
	// ContentType is the output's media type, sent by the http adapter;
	// default application/octet-stream.
	ContentType string
	// Write writes the output.
	Write func(w io.Writer) error
}

// output is a handler's result, ready to be written.
type output struct {
	contentType string
	write       func(w io.Writer) error
}

// toOutput turns a handler's result into bytes to write, by its type.
func toOutput(v any) (output, error) {
	switch o := v.(type) {
	case nil:
		return rawOutput("application/json", []byte("null")), nil
	case json.RawMessage:
		return rawOutput("application/json", o), nil
	case []byte:
		return rawOutput("application/octet-stream", o), nil
	case *Stream:
		return streamOutput(o), nil
	case Stream:
		return streamOutput(&o), nil
	case io.Reader:
		return output{contentType: "application/octet-stream", write: func(w io.Writer) error {
			if c, ok := o.(io.Closer); ok {
				defer c.Close()
			}
			_, err := io.Copy(w, o)
			return err
		}}, nil
	default:
		b, err := json.Marshal(o)
		if err != nil {
			return output{}, fmt.Errorf("encode the output: %w", err)
		}
		return rawOutput("application/json", b), nil
	}
}

func rawOutput(ct string, b []byte) output {
	return output{contentType: ct, write: func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}}
}

func streamOutput(s *Stream) output {
	ct := s.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	return output{contentType: ct, write: s.Write}
}

// invoke runs the handler and turns its answer into an output or an *Error:
// a $suspend when the handler suspended, a panic as a retryable error.
func invoke(ctx context.Context, h Handler, c *Call) (out output, fail *Error) {
	defer func() {
		if p := recover(); p != nil {
			fail = &Error{Code: "panic", Message: fmt.Sprintf("the handler panicked: %v", p), Retryable: true}
		}
	}()
	v, err := h(ctx, c)
	if err != nil {
		return output{}, asError(err)
	}
	if s := c.suspendOutput(); s != nil {
		if v != nil {
			return output{}, Terminal("protocol", "the handler suspended and returned an output too: return nil after Suspend")
		}
		return rawOutput("application/json", s), nil
	}
	out, err = toOutput(v)
	if err != nil {
		return output{}, Terminal("invalid_output", "%v", err)
	}
	return out, nil
}
