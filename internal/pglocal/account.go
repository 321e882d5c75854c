package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The unprivileged accounts PostgreSQL runs as when the caller is root: the
// distribution's own when it exists, else one of ours, created on demand.
const (
	accountDistribution = "postgres"
	accountCreated      = "cairn-pg"
)

// account is the unprivileged identity initdb and postgres run as when the
// caller is root.
type account struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32 // supplementary groups, including gid
}

// credential returns the identity to start child processes with.
func (a *account) credential() *syscall.Credential {
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
}

// lookupOrCreateAccount returns accountDistribution or accountCreated,
// creating the latter as a system account with useradd when neither exists.
func lookupOrCreateAccount(ctx context.Context) (*account, error) {
	for _, name := range []string{accountDistribution, accountCreated} {
		if a, err := lookupAccount(name); err == nil {
			return a, nil
		}
	}
	name := accountCreated
	var lastErr error
	// Several processes (parallel test binaries) may race to create the
	// account; useradd then fails with "already exists" or "cannot lock
	// /etc/passwd". Either way, look again and retry a few times.
	for attempt := 0; attempt < 5; attempt++ {
		cmd := exec.CommandContext(ctx, "useradd", "--system", "--user-group",
			"--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
			"--comment", "Cairn local PostgreSQL", name)
		out, err := cmd.CombinedOutput()
		if a, lerr := lookupAccount(name); lerr == nil {
			return a, nil
		}
		if err == nil {
			lastErr = errors.New("useradd succeeded but the account is not visible")
		} else {
			lastErr = fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("create account %s: %w", name, ctx.Err())
		case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("create account %s for PostgreSQL (initdb and postgres refuse to run as root): %w", name, lastErr)
}

func lookupAccount(name string) (*account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("look up account %s: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("account %s: uid %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("account %s: gid %q: %w", name, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("account %s has uid 0", name)
	}
	a := &account{name: name, uid: uint32(uid), gid: uint32(gid), groups: []uint32{uint32(gid)}}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil && uint32(g) != a.gid {
				a.groups = append(a.groups, uint32(g))
			}
		}
	}
	return a, nil
}

// canSearch reports whether the account may traverse the directory described
// by fi (execute permission for its owner, group or others class).
func (a *account) canSearch(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true // cannot tell; let PostgreSQL report it
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == a.uid:
		return perm&0o100 != 0
	case a.inGroup(st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

func (a *account) inGroup(gid uint32) bool {
	for _, g := range a.groups {
		if g == gid {
			return true
		}
	}
	return false
}

// checkTraverse returns an error naming the first directory above dataDir
// that the account cannot search. The permissions are left alone on purpose:
// they belong to whoever made those directories.
func (a *account) checkTraverse(dataDir string) error {
	var parents []string
	for dir := filepath.Dir(dataDir); ; dir = filepath.Dir(dir) {
		parents = append(parents, dir)
		if dir == filepath.Dir(dir) {
			break
		}
	}
	for i := len(parents) - 1; i >= 0; i-- { // from the root down
		dir := parents[i]
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("check data dir parents: %w", err)
		}
		if !a.canSearch(fi) {
			return fmt.Errorf("data dir %s: PostgreSQL runs as account %s (uid %d) because "+
				"initdb and postgres refuse to run as root, and that account cannot enter "+
				"%s (mode %v): grant it search permission (e.g. chmod o+x %s) or choose a "+
				"data dir elsewhere", dataDir, a.name, a.uid, dir, fi.Mode().Perm(), dir)
		}
	}
	return nil
}

// chownTree hands dir and everything below it to the account, without
// following symbolic links.
func (a *account) chownTree(dir string) error {
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(a.uid), int(a.gid))
	})
	if err != nil {
		return fmt.Errorf("chown %s to %s: %w", dir, a.name, err)
	}
	return nil
}

// ownedBy reports whether path belongs to the account's uid.
func (a *account) ownedBy(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == a.uid, nil
}
