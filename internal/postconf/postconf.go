// Package postconf reads Postfix's configuration as sluice needs it,
// only through postconf(1): the smtpd limits of main.cf compared with
// [anvil.smtpd] (Drift), and the MTA's session capacity from master.cf's
// smtpd process limits (MTACapacity). Its output is bounded and refused
// whole when malformed or cut short.
package postconf

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"sluice/internal/config"
)

// mainCFNames are main.cf's names of [anvil.smtpd]'s keys, in the order
// of config.SMTPDLimits.Values, and the key each is configured by.
var mainCFNames = [...]struct{ param, key string }{
	{"smtpd_client_connection_count_limit", "client_connection_count_limit"},
	{"smtpd_client_connection_rate_limit", "client_connection_rate_limit"},
	{"smtpd_client_message_rate_limit", "client_message_rate_limit"},
	{"smtpd_client_recipient_rate_limit", "client_recipient_rate_limit"},
	{"smtpd_client_new_tls_session_rate_limit", "client_new_tls_session_rate_limit"},
	{"smtpd_client_auth_rate_limit", "client_auth_rate_limit"},
}

const rateUnitParam = "anvil_rate_time_unit"

// Bounds of postconf's output: 7 short lines; anything far beyond is not
// postconf's answer.
const (
	maxPostconfOutput = 64 << 10
	postconfTimeout   = 10 * time.Second
)

// Drift compares [anvil.smtpd] and anvil.rate_time_unit with
// Postfix's main.cf in dir ("" for postconf's default, /etc/postfix), as
// postconf(1) reports them (defaults and $name expanded), and returns one
// warning per value that differs: smtpd compares the figures sluice
// reports with its own limits, so a limit that drifted scales every class
// limit wrongly. Per-service overrides in master.cf (-o) are not seen.
func Drift(ctx context.Context, cfg *config.Config, dir string) ([]string, error) {
	bin, err := exec.LookPath("postconf")
	if err != nil {
		bin = "/usr/sbin/postconf"
	}
	args := []string{"-x"}
	if dir != "" {
		args = append(args, "-c", dir)
	}
	args = append(args, rateUnitParam)
	for _, n := range mainCFNames {
		args = append(args, n.param)
	}
	ctx, cancel := context.WithTimeout(ctx, postconfTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limitWriter{b: &out, n: maxPostconfOutput}, &limitWriter{b: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	vals, err := parsePostconf(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	return postfixDrift(cfg, vals, dir)
}

// postfixDrift compares cfg with postconf's values.
func postfixDrift(cfg *config.Config, vals map[string]string, dir string) ([]string, error) {
	where := "main.cf"
	if dir != "" {
		where = strings.TrimSuffix(dir, "/") + "/main.cf"
	}
	var warns []string
	mine := cfg.Anvil.SMTPD.Values()
	for i, n := range mainCFNames {
		v, ok := vals[n.param]
		if !ok {
			return nil, fmt.Errorf("postconf did not report %s", n.param)
		}
		pf, err := strconv.ParseInt(v, 10, 64)
		if err != nil || pf < 0 {
			return nil, fmt.Errorf("postconf: %s = %q is not a limit", n.param, v)
		}
		var have int64
		if mine[i] != nil {
			have = *mine[i]
		}
		if have != pf {
			warns = append(warns, fmt.Sprintf("anvil.smtpd.%s is %d but %s has %s = %d: smtpd compares the figures sluice reports with %d, so every class limit of this figure is scaled wrongly; set anvil.smtpd.%s = %d",
				n.key, have, where, n.param, pf, pf, n.key, pf))
		}
	}
	unit, err := postfixTime(vals[rateUnitParam])
	if err != nil {
		return nil, fmt.Errorf("postconf: %s: %w", rateUnitParam, err)
	}
	if have := cfg.Anvil.RateTimeUnit.D(); have != unit {
		warns = append(warns, fmt.Sprintf("anvil.rate_time_unit is %s but %s has %s = %s: smtpd's rates are per %s; set anvil.rate_time_unit = %q",
			have, where, rateUnitParam, vals[rateUnitParam], unit, unit.String()))
	}
	return warns, nil
}

// parsePostconf reads postconf's "name = value" lines.
func parsePostconf(b []byte) (map[string]string, error) { return parsePostconfN(b, 64, 4096) }

// parsePostconfN reads postconf's "name = value" lines, at most maxParams
// of at most maxLine bytes.
func parsePostconfN(b []byte, maxParams, maxLine int) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 256), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, val, ok := strings.Cut(line, " = ")
		if !ok {
			// postconf writes "name =" for an empty value.
			if name, ok = strings.CutSuffix(line, " ="); !ok {
				return nil, fmt.Errorf("postconf output line %d: %q is not \"name = value\"", n, line)
			}
		}
		if name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("postconf output line %d: %q is not a parameter name", n, name)
		}
		if len(out) >= maxParams {
			return nil, errors.New("postconf output: more parameters than asked for")
		}
		out[name] = strings.TrimSpace(val)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("postconf output line %d: %w", n+1, err)
	}
	return out, nil
}

// postfixTime reads a Postfix time value: a number with an optional unit
// s, m, h, d or w (seconds when none).
func postfixTime(v string) (time.Duration, error) {
	num, unit := v, time.Second
	if len(v) > 0 {
		switch v[len(v)-1] {
		case 's':
			num = v[:len(v)-1]
		case 'm':
			num, unit = v[:len(v)-1], time.Minute
		case 'h':
			num, unit = v[:len(v)-1], time.Hour
		case 'd':
			num, unit = v[:len(v)-1], 24*time.Hour
		case 'w':
			num, unit = v[:len(v)-1], 7*24*time.Hour
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > int64(time.Duration(1<<62)/unit) {
		return 0, fmt.Errorf("%q is not a time", v)
	}
	return time.Duration(n) * unit, nil
}

// limitWriter keeps at most n bytes and drops the rest, noting that it
// did.
type limitWriter struct {
	b    *bytes.Buffer
	n    int
	over bool
}

func (w *limitWriter) Write(p []byte) (int, error) {
	room := w.n - w.b.Len()
	if room > 0 {
		w.b.Write(p[:min(len(p), room)])
	}
	if len(p) > room {
		w.over = true
	}
	return len(p), nil
}
