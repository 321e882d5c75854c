package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultMaxConnections is the usual cap of LimitConnections (CAIRN_MAX_CONNECTIONS):
// well below a default RLIMIT_NOFILE raised for a server, well above what the API's
// clients (CLIs, dispatchers' functions, a UI) keep open.
const DefaultMaxConnections = 4096

// connRetryAfter is the Retry-After of a connection refused at the cap: idle
// connections are closed as soon as the cap is near, so room comes back quickly.
const connRetryAfter = 2

// maxRefusing bounds the goroutines answering refused connections; past it, refused
// connections are closed without an answer.
const maxRefusing = 64

// ConnLimitConfig tunes LimitConnections. A nil *ConnLimitConfig means defaults.
type ConnLimitConfig struct {
	// Server, when set, has its keep-alives turned off while the open connections
	// are at 90% of the cap or more (which also closes its idle connections at once),
	// and on again under 75%: a client holding idle keep-alive connections cannot
	// keep others out. Default none.
	Server *http.Server
	// Metrics counts open and refused connections (pass Server.Metrics); default none.
	Metrics *Metrics
	// Logger reports the cap being reached and left; default: discard.
	Logger *slog.Logger
}

// LimitConnections returns a listener that keeps at most limit connections of ln open
// at once (limit <= 0 means DefaultMaxConnections). A connection over the cap is
// answered "503 Service Unavailable" with Retry-After and a problem body, then closed,
// rather than left waiting in the accept queue or exhausting file descriptors. The
// returned listener is safe for concurrent use; closing it closes ln.
func LimitConnections(ln net.Listener, limit int, cfg *ConnLimitConfig) net.Listener {
	var c ConnLimitConfig
	if cfg != nil {
		c = *cfg
	}
	if limit <= 0 {
		limit = DefaultMaxConnections
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	body, _ := json.Marshal(classUnavailable.problem("the server has its maximum number of open connections; try again later"))
	var refusal bytes.Buffer
	refusal.WriteString("HTTP/1.1 503 Service Unavailable\r\n")
	refusal.WriteString("Content-Type: application/problem+json\r\n")
	refusal.WriteString("Retry-After: " + strconv.Itoa(connRetryAfter) + "\r\n")
	refusal.WriteString("Connection: close\r\n")
	refusal.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	refusal.Write(body)
	return &connLimitListener{
		Listener: ln,
		cfg:      c,
		max:      limit,
		high:     max(1, limit*9/10),
		low:      limit * 3 / 4,
		refusal:  refusal.Bytes(),
		refusing: make(chan struct{}, maxRefusing),
	}
}

type connLimitListener struct {
	net.Listener
	cfg       ConnLimitConfig
	max       int
	high, low int    // keep-alives off at high open connections, on again under low
	refusal   []byte // the whole 503 response
	refusing  chan struct{}

	mu        sync.Mutex
	open      int
	pressured bool // keep-alives are off
	full      bool // the cap was reached and not yet left (for logging)
}

// Accept returns the next connection under the cap; connections over it are refused
// in the background.
func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.acquire() {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.cfg.Metrics.refused("connections")
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				l.refuse(c)
			}()
		default:
			c.Close()
		}
	}
}

func (l *connLimitListener) acquire() bool {
	l.mu.Lock()
	if l.open >= l.max {
		first := !l.full
		l.full = true
		l.mu.Unlock()
		if first {
			l.cfg.Logger.Warn("connection cap reached: new connections are refused with 503", "max_connections", l.max)
		}
		return false
	}
	l.open++
	relieve := !l.pressured && l.open >= l.high && l.cfg.Server != nil
	if relieve {
		l.pressured = true
	}
	l.mu.Unlock()
	l.cfg.Metrics.addConnections(1)
	if relieve {
		// Outside mu: closing idle connections calls release.
		l.cfg.Server.SetKeepAlivesEnabled(false)
	}
	return true
}

func (l *connLimitListener) release() {
	l.mu.Lock()
	l.open--
	restore := l.pressured && (l.open < l.low || l.open == 0)
	if restore {
		l.pressured = false
	}
	left := l.full && l.open < l.high
	if left {
		l.full = false
	}
	l.mu.Unlock()
	l.cfg.Metrics.addConnections(-1)
	if restore {
		l.cfg.Server.SetKeepAlivesEnabled(true)
	}
	if left {
		l.cfg.Logger.Info("connection cap left: new connections are accepted again", "max_connections", l.max)
	}
}

// refuse answers c with the 503 and closes it. It reads what arrived of the request
// first and waits (briefly) for the client to close: closing a socket with unread
// data resets it, and the client would see the reset instead of the answer.
func (l *connLimitListener) refuse(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4096)
	var head []byte
	for len(head) < len(buf) && !bytes.Contains(head, []byte("\r\n\r\n")) {
		n, err := c.Read(buf[len(head):])
		head = buf[:len(head)+n]
		if err != nil {
			break
		}
	}
	if _, err := c.Write(l.refusal); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// limitedConn gives its slot back once, when closed.
type limitedConn struct {
	net.Conn
	l    *connLimitListener
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.l.release)
	return err
}
