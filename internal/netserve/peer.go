package netserve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"

	"sluice/internal/peercred"
)

// PeerLimits are a door's rules per peer. A peer is a local user (its uid)
// on a unix socket or on TCP over loopback, where any local account can
// connect to a port, and an IP address for any other TCP client. Who the
// peer is is learnt at accept only when a rule needs it: SO_PEERCRED on
// a unix socket (a getsockopt), a NETLINK_SOCK_DIAG query on TCP over
// loopback (about 13 µs, internal/peercred's BenchmarkUID).
type PeerLimits struct {
	// MaxConnsPerPeer caps one peer's concurrent connections (0: no cap);
	// more are refused as MaxConns refuses them (closed, or handed to
	// Options.Refuse), while other peers still get in. A loopback peer
	// whose uid cannot be learnt is not counted per peer (it is unlisted,
	// for MaxConnsUnlisted).
	MaxConnsPerPeer int
	// AllowUIDs, when not nil, are the only users served: a connection
	// whose peer's uid is not in it, or cannot be learnt (a TCP peer off
	// loopback), is closed at once. Empty but not nil lets no one in.
	AllowUIDs []int
	// MaxConnsUnlisted caps the connections that the unlisted peers hold
	// together (0: no cap); more of theirs are refused as
	// MaxConnsPerPeer refuses them. Listed are root (uid 0), the user
	// this process runs as, and the users of AllowUIDs; unlisted is every
	// other local user, every host off loopback and every peer whose uid
	// cannot be learnt. Several local accounts, each under
	// MaxConnsPerPeer, can then together take no more than this share:
	// the rest of the door stays for the listed. With AllowUIDs set, no
	// unlisted peer is served at all and the cap has nothing to count.
	MaxConnsUnlisted int
}

// needPeer reports whether a rule needs to know who each peer is.
func (l *PeerLimits) needPeer() bool {
	return l.AllowUIDs != nil || l.MaxConnsPerPeer > 0 || l.MaxConnsUnlisted > 0
}

// peerKey names a peer: a local user by its uid, or another host by its
// IP address. The zero value is no peer known.
type peerKey struct {
	local bool // uid names the peer
	uid   int
	ip    netip.Addr
}

func (k peerKey) known() bool { return k.local || k.ip.IsValid() }

// String is "uid N", the address, or "unknown".
func (k peerKey) String() string {
	switch {
	case k.local:
		return "uid " + strconv.Itoa(k.uid)
	case k.ip.IsValid():
		return k.ip.String()
	}
	return "unknown"
}

// peerOf learns who is at the other end of c: the uid for a unix socket
// or a loopback TCP peer, the address for another TCP peer.
func peerOf(c net.Conn) (peerKey, error) {
	uid, err := peercred.UID(c)
	if err == nil {
		return peerKey{local: true, uid: uid}, nil
	}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok && errors.Is(err, peercred.ErrNotLocal) {
		return peerKey{ip: ta.AddrPort().Addr().Unmap()}, nil
	}
	return peerKey{}, err
}

// The errors of Gate.Admit.
var (
	// ErrNotAllowed: AllowUIDs refused the peer, and Admit closed the
	// connection.
	ErrNotAllowed = errors.New("the peer is not an allowed user")
	// ErrPeerFull: the peer is at MaxConnsPerPeer, or the unlisted peers
	// are at MaxConnsUnlisted; the caller refuses the connection.
	ErrPeerFull = errors.New("too many connections from the peer")
)

// Gate applies a door's PeerLimits to its connections. A Server has one;
// a server that accepts its own connections (the web server's listeners)
// makes one with NewGate. Its methods may be called concurrently.
type Gate struct {
	name     string
	log      *slog.Logger
	l        PeerLimits
	self     int // the uid this process runs as: a listed peer
	mu       sync.Mutex
	perPeer  map[peerKey]int   // open connections per peer, under MaxConnsPerPeer
	unlisted int               // open connections of unlisted peers, under MaxConnsUnlisted
	tally    map[peerKey]int64 // refusals per peer, for the log
}

// NewGate returns a Gate for l whose log lines start with name ("web").
// A nil logger is slog.Default().
func NewGate(name string, logger *slog.Logger, l PeerLimits) *Gate {
	if logger == nil {
		logger = slog.Default()
	}
	l.AllowUIDs = slices.Clone(l.AllowUIDs) // nil stays nil: everyone
	return &Gate{name: name, log: logger, l: l, self: os.Geteuid(), perPeer: map[peerKey]int{}, tally: map[peerKey]int64{}}
}

// Place is what an admitted connection holds under its Gate's limits
// until Release. The zero Place holds nothing.
type Place struct {
	g        *Gate
	peer     peerKey // who the peer is, when a rule needs it
	perPeer  bool    // counted in g.perPeer
	unlisted bool    // counted in g.unlisted
}

// Admit learns who c's peer is, when a rule needs it, and gives c a place
// under the limits. A peer that AllowUIDs refuses gets ErrNotAllowed, its
// connection closed here with a log line; one over a cap gets
// ErrPeerFull, with a log line, and c is left for the caller to refuse.
// Log lines come at each peer's 1st, 2nd, 4th, 8th... refusal.
func (g *Gate) Admit(c net.Conn) (Place, error) {
	if !g.l.needPeer() {
		return Place{}, nil
	}
	key, ok := g.identify(c)
	if !ok {
		return Place{}, ErrNotAllowed
	}
	p := Place{g: g, peer: key}
	g.mu.Lock()
	perPeer := g.l.MaxConnsPerPeer > 0 && key.known()
	unlisted := g.l.MaxConnsUnlisted > 0 && !g.listed(key)
	switch {
	case perPeer && g.perPeer[key] >= g.l.MaxConnsPerPeer:
		g.mu.Unlock()
		if n, log := g.countRefusal(key); log {
			g.log.Warn(g.name+": too many connections from one peer; closing its new ones", "peer", key.String(), "max_conns_per_peer", g.l.MaxConnsPerPeer, "refused_total", n)
		}
		return Place{}, ErrPeerFull
	case unlisted && g.unlisted >= g.l.MaxConnsUnlisted:
		g.mu.Unlock()
		if n, log := g.countRefusal(key); log {
			g.log.Warn(g.name+": too many connections from peers other than root, this process's user and allow_users; closing their new ones", "peer", key.String(), "max_conns_unlisted", g.l.MaxConnsUnlisted, "refused_total", n)
		}
		return Place{}, ErrPeerFull
	}
	if perPeer {
		g.perPeer[key]++
		p.perPeer = true
	}
	if unlisted {
		g.unlisted++
		p.unlisted = true
	}
	g.mu.Unlock()
	return p, nil
}

// listed reports whether key is root, this process's user or a user of
// AllowUIDs. The caller holds g.mu (or nothing: l and self never change).
func (g *Gate) listed(key peerKey) bool {
	return key.local && (key.uid == 0 || key.uid == g.self || slices.Contains(g.l.AllowUIDs, key.uid))
}

// Release gives back the place: the connection has ended. It is safe to
// call more than once on the same Place.
func (p *Place) Release() {
	if !p.perPeer && !p.unlisted {
		return
	}
	g := p.g
	g.mu.Lock()
	if p.perPeer {
		if g.perPeer[p.peer]--; g.perPeer[p.peer] <= 0 {
			delete(g.perPeer, p.peer)
		}
	}
	if p.unlisted {
		g.unlisted--
	}
	p.perPeer, p.unlisted = false, false
	g.mu.Unlock()
}

// identify applies AllowUIDs to a new connection and returns who its peer
// is (the zero key when it cannot be learnt). A peer not allowed is closed
// here and ok is false.
func (g *Gate) identify(c net.Conn) (key peerKey, ok bool) {
	key, err := peerOf(c)
	if g.l.AllowUIDs != nil && (err != nil || !key.local || !slices.Contains(g.l.AllowUIDs, key.uid)) {
		c.Close()
		if n, log := g.countRefusal(key); log {
			args := []any{"remote", c.RemoteAddr().String(), "refused_total", n}
			switch {
			case err != nil:
				args = append(args, "err", err)
			case key.local:
				args = append(args, "uid", key.uid)
			}
			g.log.Warn(g.name+": the peer is not an allowed user; closed its connection", args...)
		}
		return peerKey{}, false
	}
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, peercred.ErrGone) {
			level = slog.LevelDebug // it closed already: nothing to count
		}
		if n, log := g.countRefusal(peerKey{}); log {
			g.log.Log(context.Background(), level, g.name+": cannot tell who the peer is; not counting it per peer", "remote", c.RemoteAddr().String(), "err", err, "times", n)
		}
		return peerKey{}, true
	}
	return key, true
}

// maxTallied bounds the peers whose refusals are counted for the log; past
// it the counts start over (a log line each again, still bounded).
const maxTallied = 1024

// countRefusal counts one refusal of key and reports whether this one is
// logged: the 1st, 2nd, 4th, 8th... of each peer.
func (g *Gate) countRefusal(key peerKey) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.tally) >= maxTallied {
		clear(g.tally)
	}
	g.tally[key]++
	n := g.tally[key]
	return n, n&(n-1) == 0
}
