package netserve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"

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
	// whose uid cannot be learnt is not counted per peer.
	MaxConnsPerPeer int
	// AllowUIDs, when not nil, are the only users served: a connection
	// whose peer's uid is not in it, or cannot be learnt (a TCP peer off
	// loopback), is closed at once. Empty but not nil lets no one in.
	AllowUIDs []int
}

// peerKey names a peer: a local user by its uid, or another host by its
// IP address. The zero value is no peer known.
type peerKey struct {
	local bool // uid names the peer
	uid   int
	ip    netip.Addr
}

func (k peerKey) known() bool { return k.local || k.ip.IsValid() }

// String is "uid N" or the address.
func (k peerKey) String() string {
	if k.local {
		return "uid " + strconv.Itoa(k.uid)
	}
	return k.ip.String()
}

// needPeer reports whether a rule needs to know who each peer is.
func (o *Options) needPeer() bool { return o.AllowUIDs != nil || o.MaxConnsPerPeer > 0 }

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

// identify applies AllowUIDs to a new connection and returns who its peer
// is for MaxConnsPerPeer (the zero key when no rule needs it or it cannot
// be learnt). A peer not allowed is closed here and ok is false.
func (s *Server) identify(c net.Conn) (key peerKey, ok bool) {
	if !s.o.needPeer() {
		return peerKey{}, true
	}
	key, err := peerOf(c)
	if s.o.AllowUIDs != nil && (err != nil || !key.local || !slices.Contains(s.o.AllowUIDs, key.uid)) {
		c.Close()
		if n, log := s.countRefusal(key); log {
			args := []any{"remote", c.RemoteAddr().String(), "refused_total", n}
			switch {
			case err != nil:
				args = append(args, "err", err)
			case key.local:
				args = append(args, "uid", key.uid)
			}
			s.o.Logger.Warn(s.o.Name+": the peer is not an allowed user; closed its connection", args...)
		}
		return peerKey{}, false
	}
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, peercred.ErrGone) {
			level = slog.LevelDebug // it closed already: nothing to count
		}
		if n, log := s.countRefusal(peerKey{}); log {
			s.o.Logger.Log(context.Background(), level, s.o.Name+": cannot tell who the peer is; not counting it per peer", "remote", c.RemoteAddr().String(), "err", err, "times", n)
		}
		return peerKey{}, true
	}
	return key, true
}

// admitPeer counts cn against its peer's cap, or reports that the peer is
// at it. The caller holds s.mu.
func (s *Server) admitPeer(cn *Conn) bool {
	if s.o.MaxConnsPerPeer <= 0 || !cn.peer.known() {
		return true
	}
	if s.perPeer[cn.peer] >= s.o.MaxConnsPerPeer {
		return false
	}
	s.perPeer[cn.peer]++
	cn.counted = true
	return true
}

// releasePeer uncounts cn. The caller holds s.mu.
func (s *Server) releasePeer(cn *Conn) {
	if !cn.counted {
		return
	}
	if s.perPeer[cn.peer]--; s.perPeer[cn.peer] <= 0 {
		delete(s.perPeer, cn.peer)
	}
}

// logPeerFull logs a refusal for MaxConnsPerPeer, at that peer's 1st, 2nd,
// 4th, 8th... refusal.
func (s *Server) logPeerFull(key peerKey) {
	if n, log := s.countRefusal(key); log {
		s.o.Logger.Warn(s.o.Name+": too many connections from one peer; closing its new ones", "peer", key.String(), "max_conns_per_peer", s.o.MaxConnsPerPeer, "refused_total", n)
	}
}

// maxTallied bounds the peers whose refusals are counted for the log; past
// it the counts start over (a log line each again, still bounded).
const maxTallied = 1024

// countRefusal counts one refusal of key and reports whether this one is
// logged: the 1st, 2nd, 4th, 8th... of each peer.
func (s *Server) countRefusal(key peerKey) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tally) >= maxTallied {
		clear(s.tally)
	}
	s.tally[key]++
	n := s.tally[key]
	return n, n&(n-1) == 0
}
