package config

import (
	"os/user"
	"slices"
	"strconv"
	"strings"
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

// TestDoorWarnings: a mail door on TCP over loopback without allow_users
// is warned of, with how many local users fill the share the MTA's
// unlisted user is in; allow_users, a unix socket, a door that is off or
// a listener off loopback (where allow_users is an error) are not.
func TestDoorWarnings(t *testing.T) {
	const fills = "one other local user at its max_conns_per_peer (2048) fills it"
	for _, c := range []struct{ name, toml, want string }{
		{"policy on loopback", "[policy]\nlisten = [\"inet:127.0.0.1:10031\"]\n",
			`policy listens on TCP over loopback (inet:127.0.0.1:10031) without allow_users: every local account can connect to it, and the MTA's user (postfix; unless it is root or sluice's user) is unlisted, sharing max_conns_unlisted (2048) with every other account: ` + fills + `, and the MTA's new connections are closed; set policy.allow_users to the MTA's user and root (["postfix", "root"]), or serve the door on a unix socket (docs/operations.md, "Loopback is not authentication")`},
		{"anvil on localhost", "[anvil]\nlisten = [\"unix:anvil\", \"inet:localhost:2525\"]\n", "anvil listens on TCP over loopback (inet:localhost:2525) without allow_users"},
		{"throttle on ::1", "[throttle]\nlisten = [\"inet:[::1]:7000\"]\nmax_conns = 100\n", "throttle listens on TCP over loopback (inet:[::1]:7000) without allow_users: every local account can connect to it, and the MTA's user (postfix; unless it is root or sluice's user) is unlisted, sharing max_conns_unlisted (50) with every other account: one other local user at its max_conns_per_peer (50) fills it"},
		{"milter's max_sessions", "[milter]\nlisten = [\"inet:127.0.0.1:8891\"]\nmax_sessions = 1000\nmax_conns_unlisted = 0\n", "milter listens on TCP over loopback (inet:127.0.0.1:8891) without allow_users: every local account can connect to it, and the MTA's user (postfix; unless it is root or sluice's user) is unlisted, sharing the whole door (max_sessions 1000, as max_conns_unlisted = 0) with every other account: 2 other local users, each at its max_conns_per_peer (500), fill it"},
		{"a lower per-peer cap", "[policy]\nlisten = [\"inet:127.0.0.1:10031\"]\nmax_conns_per_peer = 512\n", "sharing max_conns_unlisted (2048) with every other account: 4 other local users, each at its max_conns_per_peer (512), fill it"},
		{"no per-peer cap", "[policy]\nlisten = [\"inet:127.0.0.1:10031\"]\nmax_conns_per_peer = 0\n", "one other local user fills it (max_conns_per_peer = 0: no cap per user)"},
		{"allow_users", "[policy]\nlisten = [\"inet:127.0.0.1:10031\"]\nallow_users = [\"root\"]\n", ""},
		{"unix", "[policy]\nlisten = [\"unix:policy\"]\n", ""},
		{"off", "[policy]\nenabled = false\nlisten = [\"inet:127.0.0.1:10031\"]\n", ""},
		{"milter off", "[milter]\nenabled = false\nlisten = [\"inet:127.0.0.1:8891\"]\n", ""},
		{"off loopback", "[policy]\nlisten = [\"inet:192.0.2.1:10031\"]\n", ""},
	} {
		cfg, errs := Parse([]byte(c.toml), "x.toml")
		if len(errs) > 0 {
			t.Fatalf("%s: %v", c.name, errs)
		}
		got := cfg.DoorWarnings()
		if c.want == "" {
			if len(got) > 0 {
				t.Errorf("%s: warnings %q, want none", c.name, got)
			}
			continue
		}
		if len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Errorf("%s: warnings %q, want one with %q", c.name, got, c.want)
		}
	}
}
