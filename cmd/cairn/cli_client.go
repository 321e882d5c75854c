package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cairnrun/cairn/client"
)

// defaultCredentials is the file `cairn dev` writes in its default data dir.
const defaultCredentials = ".cairn/credentials"

// newClientCmds returns the commands that talk to a server through the API.
func newClientCmds(e env, stdout, stderr io.Writer) []*cobra.Command {
	return []*cobra.Command{
		newDeployCmd(e, stdout, stderr),
		newPromoteCmd(e, stdout, stderr),
		newRollbackCmd(e, stdout, stderr),
		newWorkflowsCmd(e, stdout, stderr),
		newVersionsCmd(e, stdout, stderr),
		newRunCmd(e, stdout, stderr),
		newSecretCmd(e, stdout, stderr),
		newLimitCmd(e, stdout, stderr),
		newScheduleCmd(e, stdout, stderr),
		newEventCmd(e, stdout, stderr),
		newTokenCmd(e, stdout, stderr),
		newAuditCmd(e, stdout, stderr),
		newNamespaceCmd(e, stdout, stderr),
	}
}

// cli is what a client command works with: its streams, the environment and the
// flags that say which server to talk to with which token.
type cli struct {
	e              env
	stdout, stderr io.Writer

	server, token, credentials string
	// namespace selects the namespace the requests act in (--namespace,
	// CAIRN_NAMESPACE); "" the token's, else default.
	namespace string
	// admin: the command needs the admin role; from the credentials file it takes
	// CAIRN_ADMIN_TOKEN rather than CAIRN_TOKEN (the operator's).
	admin bool
}

func newCLI(e env, stdout, stderr io.Writer) *cli {
	return &cli{e: e, stdout: stdout, stderr: stderr}
}

// registerFlags adds --server, --token and --credentials to cmd and its subcommands.
// Tokens are read from the environment when the command runs, never shown as flag
// defaults in --help.
func (c *cli) registerFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&c.server, "server", "", "Cairn server URL (env CAIRN_SERVER)")
	f.StringVar(&c.token, "token", "", "bearer token (env CAIRN_TOKEN)")
	f.StringVar(&c.credentials, "credentials", defaultCredentials, "KEY=value file read when neither a server nor a token is given (written by cairn dev)")
	f.StringVar(&c.namespace, "namespace", "", "the namespace to act in (env CAIRN_NAMESPACE); default: the token's, else default")
}

// client connects to the server named by --server or CAIRN_SERVER with the token
// of --token or CAIRN_TOKEN. When neither a server nor a token is given, both come
// from the credentials file that `cairn dev` writes (./.cairn/credentials).
func (c *cli) client() (*client.Client, error) {
	server, serverFrom := firstSet(setting{c.server, "--server"}, setting{c.e("CAIRN_SERVER"), "CAIRN_SERVER"})
	token, tokenFrom := firstSet(setting{c.token, "--token"}, setting{c.e("CAIRN_TOKEN"), "CAIRN_TOKEN"})
	if server == "" && token == "" {
		vals, err := readCredentials(c.credentials)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("no server to talk to: pass --server and --token, set CAIRN_SERVER and CAIRN_TOKEN, or run `cairn dev` in this folder (it writes %s)", c.credentials)
		case err != nil:
			return nil, err
		}
		server, token = vals["CAIRN_SERVER"], vals["CAIRN_TOKEN"]
		if c.admin && vals["CAIRN_ADMIN_TOKEN"] != "" {
			token = vals["CAIRN_ADMIN_TOKEN"]
		}
		if server == "" || token == "" {
			return nil, fmt.Errorf("credentials file %s lacks CAIRN_SERVER or CAIRN_TOKEN", c.credentials)
		}
		serverFrom, tokenFrom = c.credentials, c.credentials
	}
	if server == "" {
		return nil, errors.New("no server: pass --server or set CAIRN_SERVER")
	}
	if token == "" {
		return nil, errors.New("no token: pass --token or set CAIRN_TOKEN")
	}
	ns, _ := firstSet(setting{c.namespace, "--namespace"}, setting{c.e("CAIRN_NAMESPACE"), "CAIRN_NAMESPACE"})
	cl, err := client.New(server, token, client.WithHTTPClient(&diagnosingDoer{next: http.DefaultClient,
		server: server, serverFrom: serverFrom, tokenFrom: tokenFrom, credentials: c.credentials}), client.WithNamespace(ns))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", server, err)
	}
	return cl, nil
}

// setting is a value of a flag or variable, and where it comes from ("--server").
type setting struct{ value, from string }

// firstSet returns the first setting with a value, and where it comes from.
func firstSet(settings ...setting) (value, from string) {
	for _, s := range settings {
		if s.value != "" {
			return s.value, s.from
		}
	}
	return "", ""
}

// diagnosingDoer sends the client's requests and turns the two failures a user
// meets first into errors that say what to do: a server that does not answer
// (none started, a wrong URL) and a token it does not know (one kept from an
// earlier `cairn dev`, which makes new tokens each time it starts). They name the
// server and where it and the token came from (a flag, a variable, the credentials
// file).
type diagnosingDoer struct {
	next                   client.HttpRequestDoer
	server, serverFrom     string
	tokenFrom, credentials string
}

// Do implements client.HttpRequestDoer.
func (d *diagnosingDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.next.Do(req)
	if err != nil {
		var opErr *net.OpError
		var dnsErr *net.DNSError
		if req.Context().Err() == nil && (errors.As(err, &opErr) && opErr.Op == "dial" || errors.As(err, &dnsErr)) {
			return nil, &unreachableError{server: d.server, from: d.serverFrom, err: err}
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized {
		defer resp.Body.Close()
		p := &client.Problem{Code: "unauthorized", Status: http.StatusUnauthorized, Title: "Unauthorized"}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(p)
		return nil, &unknownTokenError{server: d.server, from: d.tokenFrom, credentials: d.credentials, problem: p}
	}
	return resp, nil
}

// unreachableError is a server that did not answer at all.
type unreachableError struct {
	server, from string
	err          error
}

func (e *unreachableError) Error() string {
	cause := e.err.Error()
	var opErr *net.OpError
	if errors.As(e.err, &opErr) && opErr.Err != nil {
		cause = opErr.Err.Error() // "connect: connection refused", without the address again
	}
	return fmt.Sprintf("cannot reach the Cairn server at %s (from %s): %s. Is it running? Start a local one with `cairn dev` "+
		"(the CLI then finds it through %s), or give the URL of yours with --server or CAIRN_SERVER", e.server, e.from, cause, defaultCredentials)
}

func (e *unreachableError) Unwrap() error { return e.err }

// unknownTokenError is a 401: the server does not know the token. It wraps the
// server's *client.Problem.
type unknownTokenError struct {
	server, from, credentials string
	problem                   *client.Problem
}

func (e *unknownTokenError) Unwrap() error { return e.problem }

func (e *unknownTokenError) Error() string {
	if e.from == e.credentials {
		return fmt.Sprintf("the server at %s does not know the token of %s (401): the file is older than the server, or from another one; "+
			"`cairn dev` rewrites it each time it starts, with new tokens", e.server, e.from)
	}
	return fmt.Sprintf("the server at %s does not know the token of %s (401). A `cairn dev` makes new tokens each time it starts: "+
		"the current ones are in %s, in the folder it runs in (the CLI reads that file when none of --server, --token, CAIRN_SERVER "+
		"and CAIRN_TOKEN is set; to load it into a shell: set -a; . %s; set +a)", e.server, e.from, e.credentials, e.credentials)
}

// logger is the command's diagnostics logger (stderr, CAIRN_LOG_LEVEL).
func (c *cli) logger() *slog.Logger { return newLogger(c.e, c.stderr) }

// readCredentials reads KEY=value lines as `cairn dev` writes them; it also accepts
// what a shell would source: blank lines, # comments, "export " and quoted values.
func readCredentials(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read credentials: %w", err)
	}
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
			val = val[1 : len(val)-1]
		}
		vals[strings.TrimSpace(key)] = val
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read credentials %s: %w", path, err)
	}
	return vals, nil
}

// isTerminal reports whether w is a terminal (for progress bars and redrawing).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// outputFormat is the --output flag of get and list commands.
type outputFormat string

func (o *outputFormat) register(cmd *cobra.Command) {
	*o = "table"
	cmd.Flags().VarP(o, "output", "o", "output format: table or json (the API's JSON)")
}

// String implements pflag.Value.
func (o *outputFormat) String() string { return string(*o) }

// Set implements pflag.Value.
func (o *outputFormat) Set(v string) error {
	switch v {
	case "table", "json":
		*o = outputFormat(v)
		return nil
	}
	return fmt.Errorf("unknown output format %q (want table or json)", v)
}

// Type implements pflag.Value.
func (o *outputFormat) Type() string { return "format" }

func (o outputFormat) json() bool { return o == "json" }

// writeJSON prints v indented, for --output json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// firstItems gathers the items of pages (a list's page iterator, which follows
// next_cursor) until limit items (limit ≤ 0: all): typed, for tables, and as the
// API's JSON, for --output json. itemsOf returns a page's items and its raw body.
func firstItems[R, T any](pages iter.Seq2[*R, error], limit int, itemsOf func(*R) ([]T, []byte)) ([]T, []json.RawMessage, error) {
	var all []T
	var raw []json.RawMessage
	for page, err := range pages {
		if err != nil {
			return nil, nil, err
		}
		items, body := itemsOf(page)
		var p rawItems
		if err := json.Unmarshal(body, &p); err != nil {
			return nil, nil, fmt.Errorf("decode page: %w", err)
		}
		all = append(all, items...)
		raw = append(raw, p.Items...)
		if limit > 0 && len(all) >= limit {
			return all[:limit], raw[:min(limit, len(raw))], nil
		}
	}
	return all, raw, nil
}

// pageSize is the page size to ask for to show limit items (limit ≤ 0: all).
func pageSize(limit int) *int64 {
	n := int64(maxPageSize)
	if limit > 0 && limit < maxPageSize {
		n = int64(limit)
	}
	return &n
}

// maxPageSize is the largest page the API serves.
const maxPageSize = 1000

// rawItems is the --output json shape of a list: the API's items, every page joined.
type rawItems struct {
	Items []json.RawMessage `json:"items"`
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
