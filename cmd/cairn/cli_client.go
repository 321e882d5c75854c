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
	}
}

// cli is what a client command works with: its streams, the environment and the
// flags that say which server to talk to with which token.
type cli struct {
	e              env
	stdout, stderr io.Writer

	server, token, credentials string
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
}

// client connects to the server named by --server or CAIRN_SERVER with the token
// of --token or CAIRN_TOKEN. When neither a server nor a token is given, both come
// from the credentials file that `cairn dev` writes (./.cairn/credentials).
func (c *cli) client() (*client.Client, error) {
	server := firstNonEmpty(c.server, c.e("CAIRN_SERVER"))
	token := firstNonEmpty(c.token, c.e("CAIRN_TOKEN"))
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
	}
	if server == "" {
		return nil, errors.New("no server: pass --server or set CAIRN_SERVER")
	}
	if token == "" {
		return nil, errors.New("no token: pass --token or set CAIRN_TOKEN")
	}
	cl, err := client.New(server, token)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", server, err)
	}
	return cl, nil
}

// logger is the command's diagnostics logger (stderr, CAIRN_LOG_LEVEL).
func (c *cli) logger() *slog.Logger { return newLogger(c.e, c.stderr) }

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

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
