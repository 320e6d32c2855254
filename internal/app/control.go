package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"sluice/internal/ban"
	"sluice/internal/config"
	"sluice/internal/control"
	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/netserve"
	"sluice/internal/policy"
	"sluice/internal/status"
	"sluice/internal/store/memory"
)

// controlSocket is the control door as bind makes it: a unix socket in
// the runtime directory, owned by sluice's user (listenAll's default)
// and the admin group, mode 0660.
func controlSocket(k config.Control) ([]string, config.Socket) {
	return []string{"unix:" + k.Socket}, config.Socket{Group: k.AdminGroup, Mode: fmt.Sprintf("%04o", config.ControlSocketMode)}
}

func (d *Daemon) newControl(k config.Control) func(net.Listener) error {
	d.control = control.NewServer(control.Options{
		Handler: controlHandler{d},
		Logger:  d.log,
		// The admin group's members (unlisted) hold at most half of the
		// places: root and sluice's user keep the rest.
		ConnLimits: netserve.ConnLimits{MaxConns: k.MaxConns, PeerLimits: netserve.PeerLimits{MaxConnsUnlisted: config.DefaultUnlisted(k.MaxConns)},
			IdleTimeout: k.IdleTimeout.D(), RequestTimeout: k.RequestTimeout.D()},
		MaxLine: k.MaxLine,
		Allow:   controlAllow(k.AdminGroup, d.log.Warn),
	})
	return d.control.Serve
}

// controlAllow admits root, the user sluice runs as, and the members of
// the admin group (peerTrust).
func controlAllow(group string, warn func(string, ...any)) func(control.Peer) bool {
	var groups []string
	if group != "" {
		groups = []string{group}
	}
	return peerTrust("control", nil, groups, warn).trusts
}

// controlHandler carries out the control socket's commands on the
// governor in force and the daemon's marks.
type controlHandler struct{ d *Daemon }

// Handle implements control.Handler.
func (h controlHandler) Handle(ctx context.Context, peer control.Peer, req control.Request) (control.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	g := h.d.gov.Load()
	a := args(req.Args)
	switch req.Command {
	case "key.show":
		return h.keyShow(ctx, g, a, req.Attrs)
	case "key.list":
		near, err := a.int("near", 0)
		if err != nil {
			return control.Reply{}, err
		}
		keys, err := g.PolicyKeys(ctx, a["rule"], a["pattern"], int(near))
		return control.Reply{Result: keys, Text: stepsText(keys, "no keys")}, err
	case "key.reset":
		return h.keyReset(ctx, g, a)
	case "explain":
		pr, err := attrsRequest(req.Attrs)
		if err != nil {
			return control.Reply{}, err
		}
		ex, err := g.PolicyExplain(ctx, &pr)
		return control.Reply{Result: ex, Text: explainText(ex)}, err
	case "exempt.add":
		return h.exemptAdd(ctx, g, a, peer)
	case "exempt.del":
		return h.exemptDel(ctx, g, a)
	case "exempt.list":
		list, read := h.d.exempt.List(g.Limiter().Now())
		return control.Reply{Result: map[string]any{"exemptions": list, "read": read}, Text: exemptText(list)}, nil
	case "throttle.show":
		return h.throttleShow(ctx, g, a)
	case "throttle.suspend", "throttle.resume":
		return h.throttleSuspend(ctx, g, a, req.Command == "throttle.suspend")
	case "throttle.reset":
		return h.throttleReset(ctx, g, a)
	}
	return control.Reply{}, fmt.Errorf("unknown command %q", req.Command)
}

// args are a request's named arguments.
type args map[string]string

func (a args) need(names ...string) error {
	for _, n := range names {
		if a[n] == "" {
			return fmt.Errorf("missing %s (the -%s flag)", n, n)
		}
	}
	return nil
}

func (a args) int(name string, def int64) (int64, error) {
	if a[name] == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(a[name], 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s: %q is not a whole number", name, a[name])
	}
	return v, nil
}

// until is the end of a duration given as "for" from now (zero: none).
func (a args) until(now time.Time) (time.Time, error) {
	if a["for"] == "" {
		return time.Time{}, nil
	}
	d, err := time.ParseDuration(a["for"])
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("for: %q is not a positive duration (e.g. 30s, 10m, 2h)", a["for"])
	}
	return now.Add(d), nil
}

// attrsRequest decodes a request's attributes through the policy codec,
// with its checks, as the policy door would read them.
func attrsRequest(attrs map[string]string) (governor.PolicyRequest, error) {
	if len(attrs) == 0 {
		return governor.PolicyRequest{}, errors.New("no request attributes (sender=... client_address=...)")
	}
	var b strings.Builder
	b.WriteString("request=smtpd_access_policy\n")
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if strings.ContainsAny(k+attrs[k], "\n\x00") {
			return governor.PolicyRequest{}, fmt.Errorf("attribute %q: a newline or NUL in it", k)
		}
		b.WriteString(k + "=" + attrs[k] + "\n")
	}
	b.WriteString("\n")
	var req policy.Request
	if err := policy.NewDecoder(strings.NewReader(b.String()), policy.Limits{}).Decode(&req); err != nil {
		return governor.PolicyRequest{}, fmt.Errorf("request attributes: %w", err)
	}
	if req.ProtocolState == "" {
		req.ProtocolState = "RCPT"
	}
	return governorRequest(&req, req.Attr), nil
}

func (h controlHandler) keyShow(ctx context.Context, g *governor.Governor, a args, attrs map[string]string) (control.Reply, error) {
	if len(attrs) > 0 {
		pr, err := attrsRequest(attrs)
		if err != nil {
			return control.Reply{}, err
		}
		keys, err := g.PolicyRequestKeys(ctx, &pr)
		return control.Reply{Result: keys, Text: stepsText(keys, "no rule counts this request")}, err
	}
	if err := a.need("rule", "key"); err != nil {
		return control.Reply{}, fmt.Errorf("%w (or request attributes)", err)
	}
	k, err := g.PolicyKey(ctx, a["rule"], a["key"])
	return control.Reply{Result: k, Text: stepsText([]governor.RuleStep{k}, "")}, err
}

func (h controlHandler) keyReset(ctx context.Context, g *governor.Governor, a args) (control.Reply, error) {
	if err := a.need("rule", "key"); err != nil {
		return control.Reply{}, err
	}
	keys, err := g.PolicyReset(ctx, a["rule"], a["key"])
	if err != nil {
		return control.Reply{}, err
	}
	what := fmt.Sprintf("rule %s: reset %d key(s) matching %q", status.Safe(a["rule"]), len(keys), a["key"])
	if len(keys) > 0 {
		shown := make([]string, 0, 10)
		for _, k := range keys[:min(len(keys), 10)] {
			shown = append(shown, status.Safe(k))
		}
		what += ": " + strings.Join(shown, "; ")
	}
	return control.Reply{Result: map[string]any{"rule": a["rule"], "reset": keys}, Text: what + "\n", Changed: what}, nil
}

func (h controlHandler) exemptAdd(ctx context.Context, g *governor.Governor, a args, peer control.Peer) (control.Reply, error) {
	if err := a.need("rule", "key"); err != nil {
		return control.Reply{}, err
	}
	r, _, err := g.RuleKey(a["rule"], a["key"])
	if err != nil {
		return control.Reply{}, err
	}
	now := g.Limiter().Now()
	until, err := a.until(now)
	if err != nil {
		return control.Reply{}, err
	}
	raise, err := a.int("raise", 0)
	if err != nil || raise > governor.MaxRaise {
		return control.Reply{}, fmt.Errorf("raise: %q is not a whole number from 1 to %d", a["raise"], governor.MaxRaise)
	}
	x := governor.Exemption{Rule: a["rule"], Key: a["key"], Through: raise == 0, Raise: raise, Since: now, Until: until}
	if x, err = h.d.exempt.Set(ctx, r, x); err != nil {
		return control.Reply{}, err
	}
	what := exemptionText(x)
	return control.Reply{Result: x, Text: what + "\n", Changed: "exempted: " + what}, nil
}

func (h controlHandler) exemptDel(ctx context.Context, g *governor.Governor, a args) (control.Reply, error) {
	if err := a.need("rule", "key"); err != nil {
		return control.Reply{}, err
	}
	r, key, err := g.RuleKey(a["rule"], a["key"])
	switch {
	case r == nil:
		// An exemption of a rule no longer in force: its key as listed.
		key = governor.KeyFromText(a["key"])
	case err != nil:
		return control.Reply{}, err
	}
	had, err := h.d.exempt.Delete(ctx, a["rule"], key, g.Limiter().Now())
	if err != nil {
		return control.Reply{}, err
	}
	what := fmt.Sprintf("rule %s, key %s: exemption removed", status.Safe(a["rule"]), status.Safe(a["key"]))
	if !had {
		what = fmt.Sprintf("rule %s, key %s: no exemption was in force", status.Safe(a["rule"]), status.Safe(a["key"]))
	}
	return control.Reply{Result: map[string]bool{"removed": had}, Text: what + "\n", Changed: what}, nil
}

func (h controlHandler) throttleShow(ctx context.Context, g *governor.Governor, a args) (control.Reply, error) {
	var ids []string // "POLICY BUCKET"
	if a["key"] != "" {
		name, bucket, _, ok := g.ThrottleTarget(a["key"])
		if !ok {
			return control.Reply{}, fmt.Errorf("no throttle policy matches %q", a["key"])
		}
		ids = []string{name + " " + bucket}
	} else {
		var err error
		if ids, err = g.ThrottleKeys(ctx); err != nil {
			return control.Reply{}, err
		}
		if ban := h.d.throttleBan; ban != nil {
			// Keys suspended, banned or at a learned limit, holding no
			// slots.
			marked, err := ban.States(ctx)
			if err != nil {
				return control.Reply{}, err
			}
			for _, m := range marked {
				ids = append(ids, m.Key)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	var states []throttleKeyView
	for _, id := range ids {
		name, bucket, _ := strings.Cut(id, " ")
		bctx, ban := ctx, h.d.throttleBan
		if ban != nil {
			if bp := ban.Policy(name); bp != nil {
				bctx = governor.WithThrottleCap(ctx, ban.Limit(ctx, id, bp))
			}
		}
		st, ok, err := g.ThrottleBudget(bctx, name, bucket)
		if err != nil {
			return control.Reply{}, err
		}
		if !ok {
			continue // a policy a reload removed
		}
		v := throttleKeyView{ThrottleKeyState: st}
		if ban != nil {
			v.SuspendedUntil, v.Reason = ban.SuspendedUntil(ctx, id)
		}
		states = append(states, v)
	}
	return control.Reply{Result: states, Text: throttleText(states)}, nil
}

// throttleKeyView is a throttle key's state with its suspension.
type throttleKeyView struct {
	governor.ThrottleKeyState
	SuspendedUntil time.Time `json:"suspended_until,omitzero"`
	Reason         string    `json:"reason,omitempty"`
}

// throttleTarget is the budget a command's key names ("POLICY BUCKET")
// with its policy's configured limit, and the ban guard that keeps its
// marks.
func (h controlHandler) throttleTarget(g *governor.Governor, a args) (*ban.Guard, string, limiter.Limit, error) {
	if err := a.need("key"); err != nil {
		return nil, "", limiter.Limit{}, err
	}
	name, bucket, lim, ok := g.ThrottleTarget(a["key"])
	if !ok || h.d.throttleBan == nil {
		return nil, "", limiter.Limit{}, fmt.Errorf("no throttle policy matches %q", a["key"])
	}
	return h.d.throttleBan, name + " " + bucket, lim, nil
}

// throttleReset forgets a key's learned limit and ban streak.
func (h controlHandler) throttleReset(ctx context.Context, g *governor.Governor, a args) (control.Reply, error) {
	ban, id, lim, err := h.throttleTarget(g, a)
	if err != nil {
		return control.Reply{}, err
	}
	learned, bans, err := ban.Reset(ctx, id)
	if err != nil {
		return control.Reply{}, err
	}
	shown := status.Safe(id) // the texts' form
	what := fmt.Sprintf("throttle %s: limit back to %s", shown, lim)
	switch {
	case learned > 0 && bans > 0:
		what += fmt.Sprintf(" (was %d), ban streak %d forgotten", learned, bans)
	case learned > 0:
		what += fmt.Sprintf(" (was %d)", learned)
	case bans > 0:
		what += fmt.Sprintf(", ban streak %d forgotten", bans)
	default:
		what = "throttle " + shown + ": had no learned limit or ban streak"
	}
	return control.Reply{Result: map[string]any{"key": id, "learned": learned, "bans": bans, "limit": lim.String()}, Text: what + "\n", Changed: what}, nil
}

func (h controlHandler) throttleSuspend(ctx context.Context, g *governor.Governor, a args, suspend bool) (control.Reply, error) {
	ban, id, _, err := h.throttleTarget(g, a)
	if err != nil {
		return control.Reply{}, err
	}
	shown := status.Safe(id) // the texts' form
	if !suspend {
		was, err := ban.Resume(ctx, id)
		if err != nil {
			return control.Reply{}, err
		}
		what := "throttle " + shown + ": resumed"
		if !was {
			what = "throttle " + shown + ": was not suspended"
		}
		return control.Reply{Result: map[string]any{"key": id, "was_suspended": was}, Text: what + "\n", Changed: what}, nil
	}
	if a["for"] == "" {
		return control.Reply{}, errors.New("missing for (how long: 30s, 1h ...)")
	}
	until, err := a.until(ban.Now())
	if err != nil {
		return control.Reply{}, err
	}
	if err := ban.Suspend(ctx, id, until); err != nil {
		return control.Reply{}, err
	}
	what := "throttle " + shown + ": suspended until " + until.UTC().Format(time.RFC3339)
	return control.Reply{Result: map[string]any{"key": id, "until": until}, Text: what + "\n", Changed: what}, nil
}

// ExplainOffline explains a request against cfg's policy rules with
// nothing counted yet and no exemption (sluice check -c FILE plus a
// request): the rules tried before they go live, through the same
// decision the daemon makes.
func ExplainOffline(ctx context.Context, cfg *config.Config, attrs map[string]string) (governor.Explanation, string, error) {
	discard := slog.New(slog.DiscardHandler)
	st := memory.New(memory.Options{MaxKeys: 1 << 10})
	defer st.Close()
	lim := limiter.New(limiter.Options{Store: st, Logger: discard})
	g, err := buildGovernor(cfg, lim, nil, nil, nil, nil, nil, nil, discard)
	if err != nil {
		return governor.Explanation{}, "", err
	}
	pr, err := attrsRequest(attrs)
	if err != nil {
		return governor.Explanation{}, "", err
	}
	ex, err := g.PolicyExplain(ctx, &pr)
	if err != nil {
		return ex, "", err
	}
	return ex, explainText(ex), nil
}
