package postconf

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/sendmailcf"
)

// The MTA's capacity: how many SMTP sessions it serves at once, which the
// classes' reservations divide. [mta] sessions sets it; otherwise it is
// read from Postfix's master.cf through postconf when
// anvil.postfix_config_dir is set: the process limits of every smtpd
// service (type inet, or pass behind postscreen), "-" being
// default_process_limit. Every smtpd asks the same anvil, so sluice
// counts the sessions of all of them against the sum.

// Bounds of what is read from master.cf: services, one field's line,
// and postconf's whole output (beyond it the answer is refused, never
// read cut short).
const (
	maxMasterServices = 1024
	maxMasterLine     = 64 << 10
	maxMasterOutput   = 4 << 20
)

// Capacity is the MTA's capacity and where it was found; its fields are
// governor.Capacity's, which it converts to.
type Capacity struct {
	// Sessions is the capacity; 0 when unknown.
	Sessions int64
	// From says where it was found: "mta.sessions" or the MTA file.
	From string
}

// Configured is the capacity [mta] sessions sets (zero: none).
func Configured(cfg *config.Config) Capacity {
	if cfg.MTA.Sessions > 0 {
		return Capacity{Sessions: cfg.MTA.Sessions, From: "mta.sessions"}
	}
	return Capacity{}
}

// MTACapacity finds the MTA's capacity: [mta] sessions, else Sendmail's
// MaxDaemonChildren when mta.sendmail_cf is set, else Postfix's smtpd
// process limits when anvil.postfix_config_dir is set. The zero Capacity
// and no error: nowhere to read it from.
func MTACapacity(ctx context.Context, cfg *config.Config) (Capacity, error) {
	if c := Configured(cfg); c.Sessions > 0 {
		return c, nil
	}
	if p := cfg.MTA.SendmailCF; p != "" {
		p = cfg.Relative(p)
		n, err := sendmailcf.MaxDaemonChildren(p)
		if err != nil {
			return Capacity{}, err
		}
		return Capacity{Sessions: n, From: p + ": MaxDaemonChildren"}, nil
	}
	dir := cfg.Anvil.PostfixConfigDir
	if dir == "" || !cfg.Anvil.Enabled {
		return Capacity{}, nil
	}
	fields, err := runPostconf(ctx, dir, "-F", "*/inet/command", "*/inet/process_limit", "*/pass/command", "*/pass/process_limit")
	if err != nil {
		return Capacity{}, err
	}
	def, err := runPostconf(ctx, dir, "default_process_limit")
	if err != nil {
		return Capacity{}, err
	}
	return smtpdCapacity(fields, def, dir)
}

// runPostconf runs postconf -c dir with args and returns its output.
func runPostconf(ctx context.Context, dir string, args ...string) ([]byte, error) {
	bin, err := exec.LookPath("postconf")
	if err != nil {
		bin = "/usr/sbin/postconf"
	}
	args = append([]string{"-c", dir}, args...)
	ctx, cancel := context.WithTimeout(ctx, postconfTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, stderr bytes.Buffer
	stdout := &limitWriter{b: &out, n: maxMasterOutput}
	cmd.Stdout, cmd.Stderr = stdout, &limitWriter{b: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if stdout.over {
		return nil, fmt.Errorf("%s %s: more than %d bytes of output", bin, strings.Join(args, " "), maxMasterOutput)
	}
	return out.Bytes(), nil
}

// smtpdCapacity adds up the process limits of the smtpd services in
// postconf -F's output, "-" standing for default_process_limit (def is
// postconf's "default_process_limit = N" line).
func smtpdCapacity(fields, def []byte, dir string) (Capacity, error) {
	dv, err := parsePostconf(def)
	if err != nil {
		return Capacity{}, err
	}
	defLimit, err := strconv.ParseInt(dv["default_process_limit"], 10, 64)
	if err != nil || defLimit < 0 {
		return Capacity{}, fmt.Errorf("postconf: default_process_limit = %q is not a process limit", dv["default_process_limit"])
	}
	svcs, err := parseMasterFields(fields)
	if err != nil {
		return Capacity{}, err
	}
	var total int64
	var parts []string
	names := make([]string, 0, len(svcs))
	for name := range svcs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := svcs[name]
		if cmd, _, _ := strings.Cut(s.command, " "); cmd != "smtpd" {
			continue
		}
		n := defLimit
		if s.limit != "-" {
			n, err = strconv.ParseInt(s.limit, 10, 64)
			if err != nil || n < 0 || n > 1<<30 {
				return Capacity{}, fmt.Errorf("postconf: %s/process_limit = %q is not a process limit", name, s.limit)
			}
		}
		if n == 0 { // no limit: smtpd processes are not capped
			return Capacity{}, fmt.Errorf("master.cf service %s runs smtpd without a process limit (0): there is no capacity to divide; set [mta] sessions", name)
		}
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", name, n))
	}
	if total == 0 {
		return Capacity{}, fmt.Errorf("%s/master.cf has no smtpd service", strings.TrimSuffix(dir, "/"))
	}
	from := fmt.Sprintf("%s/master.cf through postconf: smtpd process limits %s", strings.TrimSuffix(dir, "/"), strings.Join(parts, " + "))
	return Capacity{Sessions: total, From: from}, nil
}

// masterService is one master.cf service's command and process limit.
type masterService struct{ command, limit string }

// parseMasterFields reads postconf -F's "service/type/field = value"
// lines into services keyed "service/type".
func parseMasterFields(b []byte) (map[string]masterService, error) {
	vals, err := parsePostconfN(b, 2*maxMasterServices, maxMasterLine)
	if err != nil {
		return nil, err
	}
	out := map[string]masterService{}
	for name, v := range vals {
		i := strings.LastIndexByte(name, '/')
		if i <= 0 {
			return nil, fmt.Errorf("postconf -F: %q is not service/type/field", name)
		}
		svc, field := name[:i], name[i+1:]
		if !strings.Contains(svc, "/") {
			return nil, fmt.Errorf("postconf -F: %q is not service/type/field", name)
		}
		s := out[svc]
		switch field {
		case "command":
			s.command = v
		case "process_limit":
			s.limit = v
		default:
			return nil, fmt.Errorf("postconf -F: field %q was not asked for", field)
		}
		out[svc] = s
	}
	for name, s := range out {
		if s.command == "" || s.limit == "" {
			return nil, fmt.Errorf("postconf -F: service %s lacks its command or process limit", name)
		}
	}
	return out, nil
}
