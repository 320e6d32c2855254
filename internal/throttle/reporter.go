package throttle

import (
	"fmt"
	"net"

	"sluice/internal/peercred"
)

// Reporter is who sent a send's result, as the kernel names it.
type Reporter struct {
	// Trusted says whether Options.TrustReport admits the peer (always,
	// without one): only a trusted report may change what the key's
	// other senders get (a suspension, a learned limit).
	Trusted bool
	// Peer names the peer for log lines: "uid U gid G pid P" on a unix
	// socket, "uid U" on loopback TCP, else its address.
	Peer string
}

// reporter identifies the peer of c and judges it with trust (nil:
// everyone is trusted).
func reporter(c net.Conn, trust func(peercred.Cred) bool) Reporter {
	cred := peercred.Cred{UID: -1, GID: -1, PID: -1}
	peer := c.RemoteAddr().String()
	if _, ok := c.RemoteAddr().(*net.UnixAddr); ok {
		if cr, err := peercred.Unix(c); err == nil {
			cred = cr
			peer = fmt.Sprintf("uid %d gid %d pid %d", cr.UID, cr.GID, cr.PID)
		}
	} else if uid, err := peercred.UID(c); err == nil {
		cred.UID = uid
		peer = fmt.Sprintf("uid %d (%s)", uid, peer)
	}
	return Reporter{Trusted: trust == nil || trust(cred), Peer: peer}
}
