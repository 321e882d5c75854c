// Package pglocal runs a private PostgreSQL cluster from the PostgreSQL server
// binaries installed on the machine. `cairn dev` keeps its catalog in one, and
// internal/testenv starts one per test binary when no server is configured.
//
// [Start] finds the binaries (see [Config.BinDir] for the search order), runs
// initdb on a new data directory or reuses an initialized one with its data,
// and starts the postmaster listening on 127.0.0.1 only, with its Unix socket
// inside the data directory and its log in <DataDir>/postgres.log. It returns
// once the server accepts connections.
//
// # Passwords
//
// Anyone who can reach 127.0.0.1 can reach the server: every local process, and
// the handlers of a Cairn server that share the host's network. So every
// connection, over TCP and over the Unix socket alike, authenticates with a
// password (SCRAM-SHA-256): the cluster writes its own pg_hba.conf before every
// start, with no "trust" and no "peer" in it. The superuser ([Config.User]) gets
// a random password before the server first starts, kept in
// <DataDir>/superuser-password ([PasswordFileName], mode 0600, owned by the
// account the server runs as); [Cluster.URL] carries it. A data directory
// initialized by an earlier version with trust authentication gets one the same
// way, through PostgreSQL's single-user mode, so it never listens without one.
// Applications should not work as the superuser, which can run programs as the
// server's account (COPY … TO PROGRAM): [Cluster.CreateRole] makes a role that
// can do no more than it owns or is granted, [Cluster.CreateDatabase] gives a
// database to such a role, [Cluster.GrantAccess] lets another one use its rows,
// and [Cluster.RoleURL] is their URL.
//
// # Why the postmaster is a direct child
//
// The postmaster is started directly (`postgres -D dir -p port -c ...`), not
// through `pg_ctl start`. pg_ctl forks a shell that forks postgres and then
// exits, so the postmaster would be re-parented to init: the cluster could not
// observe its exit with [os/exec.Cmd.Wait], could not use the kernel's
// parent-death signal ([Config.DieWithParent]) and could not put it in a
// process group of its own with a known id. As a direct child its exit is
// reaped without polling, and [Cluster.Stop] sends the same signals pg_ctl
// would (SIGINT for a fast shutdown, SIGQUIT for an immediate one).
//
// The postmaster runs in its own process group, so a Ctrl-C at a terminal,
// which signals the whole foreground group, reaches the parent only; the
// parent then stops PostgreSQL in order.
//
// # Root
//
// initdb and postgres refuse to run as root. When the calling process is
// root, both run as an unprivileged account instead: "postgres" when it exists
// (Debian's postgresql package creates it), otherwise a system account
// "cairn-pg" created with useradd. The data directory is handed to that
// account, and every directory above it must be searchable by it: when one is
// not, Start fails naming that directory rather than changing permissions on
// directories it does not own. Run as an ordinary user, the processes run as
// that user.
//
// # Left-over state
//
// A data directory may hold traces of an earlier owner that died without
// stopping PostgreSQL: a postmaster.pid naming a dead process (the server was
// killed too), one naming a live postmaster of this data directory (the server
// survived its parent), or orphaned backends of a killed postmaster still
// holding the shared memory. None of these is an error: before every start the
// cluster stops a live postmaster of its data directory (fast shutdown, then
// immediate, then SIGKILL), kills orphaned backends, and removes a stale
// postmaster.pid whose process id was reused by an unrelated process. A
// process is recognised as a server of the data directory by its executable
// (postgres) and its working directory (the data directory, where every
// PostgreSQL server process lives). Note what follows: a second process
// calling Start on a data directory that is in use takes it over.
package pglocal
