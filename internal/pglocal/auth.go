package pglocal

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lib/pq"
)

// PasswordFileName is the file in the data directory that holds the
// superuser's password (mode 0600, owned by the account PostgreSQL runs as).
// Removing it makes the next start set a new password.
const PasswordFileName = "superuser-password"

// hbaFileName is PostgreSQL's client authentication file in the data directory.
const hbaFileName = "pg_hba.conf"

// hbaConf is the pg_hba.conf written before every start: every connection,
// over the Unix socket as over TCP, and whatever its role, authenticates with a
// password (SCRAM-SHA-256). Nothing is trusted, no operating system user is
// taken at its word (peer), and replication connections are refused (but the
// superuser's, with Config.Replication). Anyone
// who can reach 127.0.0.1 can reach the server (the exec handlers of a server
// that shares the host's network, say), so the password is all that keeps them
// out.
const hbaConf = `# Written by Cairn (internal/pglocal) before every start: edits are lost.
# Every connection, over the Unix socket as over TCP, authenticates with a
# password (SCRAM-SHA-256): no trust, no peer, no replication connections.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 scram-sha-256
host    all       all   127.0.0.1/32  scram-sha-256
`

// scramIterations is the PBKDF2 iteration count of the password verifiers,
// PostgreSQL's own default (scram_iterations).
const scramIterations = 4096

// ensureAuth makes the data directory's server ask every connection for a
// password: it writes pg_hba.conf, and, when the data directory has no password
// file (a new one, or one initialized by an earlier version with trust
// authentication), gives the superuser a new random password and writes the
// file. It runs before the server starts, with no server running, so no
// connection is ever accepted without a password. The password never changes
// once a Cluster has started: a file removed or edited in the meantime is
// written again with it.
func (c *Cluster) ensureAuth(ctx context.Context) error {
	hba := hbaConf
	if c.cfg.Replication {
		hba += "host    replication " + c.cfg.User + " 127.0.0.1/32  scram-sha-256\n"
	}
	if err := c.writeOwned(filepath.Join(c.dataDir, hbaFileName), []byte(hba)); err != nil {
		return err
	}
	path := c.PasswordFile()
	b, err := os.ReadFile(path)
	stored := strings.TrimSpace(string(b))
	switch {
	case err == nil && stored != "" && (c.password == "" || stored == c.password):
		if c.password == "" { // written once: URL reads it without the lock
			c.password = stored
		}
		return nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read the superuser's password: %w", err)
	}
	password := c.password
	if password == "" {
		password = rand.Text()
	}
	c.logger.Info("setting the superuser's password", "user", c.cfg.User, "file", path)
	if err := c.setSuperuserPassword(ctx, password); err != nil {
		return err
	}
	// Written after the password is set: a start killed in between finds no
	// file and sets a new one, where a file written first would name a password
	// the server does not know.
	if err := c.writeOwned(path, []byte(password+"\n")); err != nil {
		return err
	}
	if c.password == "" {
		c.password = password
	}
	return nil
}

// setSuperuserPassword sets the superuser's password through PostgreSQL's
// single-user mode, which needs no connection (and so no authentication) and
// runs only while no server does. The statement carries a SCRAM verifier, not
// the password, so the password reaches no log.
func (c *Cluster) setSuperuserPassword(ctx context.Context, password string) error {
	verifier, err := scramVerifier(password)
	if err != nil {
		return err
	}
	args := append([]string{"--single", "-D", c.dataDir}, c.settingArgs()...)
	// exit_on_error: an error ends the session with a non-zero status, which
	// is how the statement's failure is told from its success.
	args = append(args, "-c", "exit_on_error=on", "template1")
	cmd := exec.CommandContext(ctx, c.bins.postgres, args...)
	cmd.Dir = "/"
	cmd.Env = childEnv()
	cmd.Stdin = strings.NewReader("ALTER ROLE " + pq.QuoteIdentifier(c.cfg.User) + " PASSWORD " + pq.QuoteLiteral(verifier) + ";\n")
	if c.acct != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.acct.credential()}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("set the password of superuser %s (was the data dir initialized with another Config.User?): %w: %s",
			c.cfg.User, err, lastLines(out, 20))
	}
	return nil
}

// writeOwned replaces the file at path with data, mode 0600, owned by the
// account the server runs as. It writes a temporary file and renames it, so a
// reader never sees half a file.
func (c *Cluster) writeOwned(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // a no-op after the rename
	_, err = f.Write(data)
	if err == nil && c.acct != nil {
		err = f.Chown(int(c.acct.uid), int(c.acct.gid))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// scramVerifier returns what PostgreSQL stores for a SCRAM-SHA-256 password
// (RFC 5802, RFC 7677), in its format:
// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>. Given one in
// CREATE or ALTER ROLE … PASSWORD, PostgreSQL stores it as it is.
func scramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("scram verifier: %w", err)
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	storedKey := sha256.Sum256(mac(salted, "Client Key"))
	serverKey := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

// PasswordFile returns the path of the file holding the superuser's password
// (see [PasswordFileName]).
func (c *Cluster) PasswordFile() string { return filepath.Join(c.dataDir, PasswordFileName) }
