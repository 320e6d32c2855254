// Package nftset is the privileged half of the escalation (see
// internal/escalate): sluice escalate-helper, run as root, owns the
// nftables table of [mta.escalate] table ("inet sluice"), whose sets flood4 and flood6 hold the
// addresses whose connections to the SMTP ports are dropped, each with a
// timeout. It answers one peer, the daemon's user, on a unix socket, and
// does one thing for it: add an address to a set for a bounded time.
// It never deletes, flushes or lists, runs nft(8) with an argument
// vector (never a shell) built from a parsed address and a number, and
// removes its table when it stops.
package nftset

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ruleset says what the helper's table holds.
type Ruleset struct {
	Table string // its name (family inet), checked by config as a plain name
	Ports []int  // the TCP ports whose connections from the sets' addresses are dropped
	Size  int    // each set's most addresses; an add past it fails
}

// Text returns the table as nft -f reads it: made anew (an old one from
// a helper that did not stop cleanly is deleted first).
func (r Ruleset) Text() string {
	ports := make([]string, len(r.Ports))
	for i, p := range r.Ports {
		ports[i] = strconv.Itoa(p)
	}
	size := strconv.Itoa(r.Size)
	var b strings.Builder
	b.WriteString("add table inet " + r.Table + "\ndelete table inet " + r.Table + "\n")
	b.WriteString("table inet " + r.Table + " {\n")
	b.WriteString("\tset flood4 { type ipv4_addr; flags timeout; size " + size + "; }\n")
	b.WriteString("\tset flood6 { type ipv6_addr; flags timeout; size " + size + "; }\n")
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority filter - 10; policy accept;\n")
	b.WriteString("\t\ttcp dport { " + strings.Join(ports, ", ") + " } ip saddr @flood4 drop\n")
	b.WriteString("\t\ttcp dport { " + strings.Join(ports, ", ") + " } ip6 saddr @flood6 drop\n")
	b.WriteString("\t}\n}\n")
	return b.String()
}

// Nft runs nft(8) on one table: Path is nft's absolute path, Table the
// table's name.
type Nft struct {
	Path  string
	Table string
	mu    sync.Mutex // one nft at a time
}

// runTimeout bounds one run of nft.
const runTimeout = 10 * time.Second

// run runs nft with args, stdin in, and returns its error with what it
// printed.
func (n *Nft) run(ctx context.Context, in string, args ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.Path, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if in != "" {
		cmd.Stdin = strings.NewReader(in)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.Join(strings.Fields(out.String()), " ")
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return nil
}

// Install makes the helper's table anew, with empty sets.
func (n *Nft) Install(ctx context.Context, r Ruleset) error {
	r.Table = n.Table
	return n.run(ctx, r.Text(), "-f", "-")
}

// Remove deletes the helper's table, and with it every drop.
func (n *Nft) Remove(ctx context.Context) error {
	return n.run(ctx, "add table inet "+n.Table+"\ndelete table inet "+n.Table+"\n", "-f", "-")
}

// Add puts addr in its family's set for d (whole seconds, at least 1).
// An address already there keeps its timeout (the daemon asks again
// only once the last one ended).
func (n *Nft) Add(ctx context.Context, addr netip.Addr, d time.Duration) error {
	addr = addr.Unmap()
	set := "flood4"
	if addr.Is6() {
		set = "flood6"
	}
	secs := max(int64(d/time.Second), 1)
	elem := addr.String() + " timeout " + strconv.FormatInt(secs, 10) + "s"
	return n.run(ctx, "add element inet "+n.Table+" "+set+" { "+elem+" }\n", "-f", "-")
}
