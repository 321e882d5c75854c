// Package fn is Cairn's function SDK for Go: one handler serves a step of every
// kind, exec (stdin, stdout, fd 3), http (NewHTTPHandler, which verifies
// Cairn-Signature) and lambda (LambdaHandler, through aws-lambda-go), over the
// protocol docs/functions.md specifies. It depends on the standard library and
// aws-lambda-go only.
//
// A handler gets a *Call (the envelope, typed) and returns the step's output:
//
//	func main() {
//		fn.Run(func(ctx context.Context, c *fn.Call) (any, error) {
//			var in struct{ Name string `json:"name"` }
//			if err := c.Input(&in); err != nil {
//				return nil, fn.Terminal("bad_input", err.Error())
//			}
//			return map[string]string{"greeting": "hello, " + in.Name}, nil
//		})
//	}
//
// Run picks the kind from the environment: AWS_LAMBDA_RUNTIME_API (set by
// Lambda) serves Lambda invocations, CAIRN_FN_LISTEN (an address such as
// ":8080") serves http calls, and anything else runs one exec attempt.
//
// The output is what the handler returns: nil is JSON null, a json.RawMessage
// or []byte is written as it is, an io.Reader or a Stream is copied as it is
// produced (never held whole in memory), and any other value is encoded as JSON.
// A returned *Error (Terminal, Retryable) says whether Cairn retries; any other
// error is retryable. Call.Suspend ends the attempt with {"$suspend": …} and
// gives the callback URL that completes the step later.
//
// Error messages of this package never hold the attempt's credentials (the
// lease token, the callback and checkpoint URLs, presigned URLs, the signing
// key): they name what failed, not where.
package fn
