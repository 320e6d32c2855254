package config

import (
	"os/user"
	"slices"
	"strconv"
	"testing"
)

// TestPeerRules: max_conns_per_peer defaults to half the door's cap,
// rounded up, and max_conns_unlisted to half, rounded down (the milter's
// is max_sessions); 0 stays 0 (no cap); allow_users becomes uids, nil
// when empty.
func TestPeerRules(t *testing.T) {
	c, errs := Load("testdata/good/peers.toml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	check := func(door string, rules func() (PeerRules, error), perPeer, unlisted int, uids []int) {
		t.Helper()
		r, err := rules()
		if err != nil || r.MaxConnsPerPeer != perPeer || r.MaxConnsUnlisted != unlisted || !slices.Equal(r.AllowUIDs, uids) || (uids == nil) != (r.AllowUIDs == nil) {
			t.Errorf("%s: %+v %v; want per peer %d, unlisted %d, uids %v", door, r, err, perPeer, unlisted, uids)
		}
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	nobodyUID, _ := strconv.Atoi(nobody.Uid)
	check("anvil", c.Anvil.PeerRules, 100, 2048, []int{0})
	check("policy", c.Policy.PeerRules, 2048, 2048, []int{0, nobodyUID})
	check("throttle", c.Throttle.PeerRules, 0, 0, nil)
	check("milter", c.Milter.PeerRules, 64, 64, nil)
	c.Milter.MaxConnsPerPeer, c.Milter.MaxConnsUnlisted, c.Milter.MaxSessions = nil, nil, 7
	check("milter, max_sessions 7", c.Milter.PeerRules, 4, 3, nil)

	// A user gone since validation is left out, and the list stays
	// closed: not nil, so not "everyone".
	c.Anvil.AllowUsers = []string{"no-such-user-here"}
	r, err := c.Anvil.PeerRules()
	if err == nil || r.AllowUIDs == nil || len(r.AllowUIDs) != 0 {
		t.Errorf("vanished user: %+v %v; want an empty, non-nil list and an error", r, err)
	}
}
