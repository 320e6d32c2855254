package config

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sluice/internal/classfile"
	"sluice/internal/hostmask"
	"sluice/internal/syslog"
)

// maxProcs bounds procs: more threads than this is a typing mistake.
const maxProcs = 1024

// Validate checks the configuration and returns every problem found, each
// with its file, line and key path.
func (c *Config) Validate() []error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }

	if c.StateDir == "" {
		add("state_dir", "must not be empty")
	}
	if c.Procs < 0 || c.Procs > maxProcs {
		add("procs", "%d: want 1 to %d threads, or 0 for one per CPU the process may use", c.Procs, maxProcs)
	}
	if c.RuntimeDir != "" && !filepath.IsAbs(c.RuntimeDir) {
		add("runtime_dir", "%q: want an absolute path such as /run/sluice", c.RuntimeDir)
	}
	if c.User != "" {
		if _, err := user.Lookup(c.User); err != nil {
			add("user", "%q is not a user of this system (create it: adduser --system --group %s)", c.User, c.User)
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		add("log.format", "%q is not one of text, json", c.Log.Format)
	}
	switch c.Log.Output {
	case "stderr":
	case "syslog":
		if c.Log.Format == "json" {
			add("log.format", "json is for output = \"stderr\"; syslog lines are \"message key=value\"")
		}
		if _, ok := syslog.FacilityCode(c.Log.Facility); !ok {
			add("log.facility", "%q is not a syslog facility (mail, daemon, local0 ... local7, ...)", c.Log.Facility)
		}
		if c.Log.Tag == "" || strings.ContainsAny(c.Log.Tag, " :[]\n\r\x00") {
			add("log.tag", "%q: want a word without spaces, colons or brackets", c.Log.Tag)
		}
		if !filepath.IsAbs(c.Log.SyslogSocket) {
			add("log.syslog_socket", "%q: want an absolute path such as /dev/log", c.Log.SyslogSocket)
		}
	default:
		add("log.output", "%q is not one of stderr, syslog", c.Log.Output)
	}
	if c.Limiter.MaxKeys < 1 {
		add("limiter.max_keys", "must be at least 1")
	}
	switch c.Limiter.WhenFull {
	case "evict", "fail-open", "fail-closed":
	default:
		add("limiter.when_full", "%q is not one of evict, fail-open, fail-closed", c.Limiter.WhenFull)
	}
	if c.Limiter.StatusInterval.D() < time.Second {
		add("limiter.status_interval", "must be at least 1s")
	}
	if c.Log.MaxLinesPerSecond < 0 {
		add("log.max_lines_per_second", "must be 0 (no cap) or more")
	}
	errs = append(errs, c.validateStore()...)
	_, classErrs := c.ClassTable()
	errs = append(errs, classErrs...)
	errs = append(errs, c.validateAnvil()...)
	errs = append(errs, c.validateMTA()...)
	errs = append(errs, c.validateEscalate()...)
	errs = append(errs, c.validatePolicy()...)
	errs = append(errs, c.validateThrottle()...)
	errs = append(errs, c.validateMilter()...)
	errs = append(errs, c.validateWeb()...)
	errs = append(errs, c.validateControl()...)
	return errs
}

// ClassSpec is one class as configured, masks parsed: Name, Masks (from
// match), Refuse, Queue and Reserve are its [[class]] keys, Anvil its
// [class.anvil] overrides.
type ClassSpec struct {
	Name    string
	Masks   []hostmask.Mask
	Refuse  int64
	Queue   int64
	Reserve int64
	Anvil   SMTPDLimits
	// Where is "file:line" of its definition (of its last change, when an
	// include_dir file changed it in place).
	Where string
	// File is the file that defined it, which decides its place: the
	// main file, the include_dir file that added it (before the
	// catch-all class), or classes_file; "" for the built-in class.
	File string
}

// ClassTable returns the classes of [[class]] followed by those of
// classes_file. With no classes at all it returns one catch-all class
// "default" without caps. The last class must be "*" alone.
func (c *Config) ClassTable() ([]ClassSpec, []error) {
	var errs []error
	var out []ClassSpec
	seen := map[string]string{}
	for i, cl := range c.Classes {
		path := fmt.Sprintf("class[%d]", i+1)
		where := c.where(path)
		if cl.Name == "" {
			errs = append(errs, c.errAt(path+".name", "every class needs a name"))
		} else if prev, dup := seen[cl.Name]; dup {
			errs = append(errs, c.errAt(path+".name", "class %q already defined at %s", cl.Name, prev))
		}
		seen[cl.Name] = where
		if len(cl.Match) == 0 {
			errs = append(errs, c.errAt(path+".match", "a class needs at least one mask"))
		}
		spec := ClassSpec{Name: cl.Name, Refuse: cl.Refuse, Queue: cl.Queue, Reserve: cl.Reserve, Anvil: cl.Anvil, Where: where, File: c.definedIn(path)}
		for j, s := range cl.Match {
			m, err := hostmask.Parse(s)
			if err != nil {
				errs = append(errs, c.errAt(fmt.Sprintf("%s.match[%d]", path, j+1), "%v", err))
				continue
			}
			spec.Masks = append(spec.Masks, m)
		}
		if cl.Refuse < 0 {
			errs = append(errs, c.errAt(path+".refuse", "must not be negative"))
		}
		if cl.Queue < 0 {
			errs = append(errs, c.errAt(path+".queue", "must not be negative"))
		}
		errs = append(errs, c.validateReserve(path, cl)...)
		errs = append(errs, c.validateClassAnvil(path+".anvil", cl.Anvil)...)
		out = append(out, spec)
	}
	if c.ClassesFile != "" {
		res, ferrs := classfile.ReadFile(c.Relative(c.ClassesFile))
		for _, e := range ferrs {
			errs = append(errs, c.errAt("classes_file", "%v", e))
		}
		for _, e := range res.Entries {
			name := e.Mask.String()
			where := fmt.Sprintf("%s:%d", c.Relative(c.ClassesFile), e.Line)
			if prev, dup := seen[name]; dup {
				errs = append(errs, fmt.Errorf("%s: class %q already defined at %s", where, name, prev))
			}
			seen[name] = where
			out = append(out, ClassSpec{Name: name, Masks: []hostmask.Mask{e.Mask}, Refuse: int64(e.Refuse), Queue: int64(e.Queue), Where: where, File: c.Relative(c.ClassesFile)})
		}
	}
	if len(out) == 0 {
		return []ClassSpec{{Name: "default", Masks: []hostmask.Mask{hostmask.MustParse("*")}, Where: "built-in"}}, errs
	}
	if last := out[len(out)-1]; len(last.Masks) != 1 || !last.Masks[0].IsAny() {
		if len(errs) == 0 || len(last.Masks) > 0 {
			errs = append(errs, fmt.Errorf("%s: the last class (%q) must match \"*\" alone, so that every peer falls in a class (XLA leaves a miss undefined; sluice refuses it)", last.Where, last.Name))
		}
	}
	return out, errs
}

// definedIn is the file that defined the entry of a named array at path
// ("class[2]"): the include_dir file that added it, else the main file.
func (c *Config) definedIn(path string) string {
	if f, ok := c.added[path]; ok {
		return f
	}
	return c.File
}

func (c *Config) where(path string) string {
	if l, ok := c.lines[path]; ok && c.File != "" {
		if f := c.from[path]; f != "" {
			return fmt.Sprintf("%s:%d", f, l)
		}
		return fmt.Sprintf("%s:%d", c.File, l)
	}
	if c.File != "" {
		return c.File
	}
	return path
}

var limitNames = []string{
	"client_connection_count_limit", "client_connection_rate_limit", "client_message_rate_limit",
	"client_recipient_rate_limit", "client_new_tls_session_rate_limit", "client_auth_rate_limit",
}

// Values returns the six limits in the order of limitNames.
func (l SMTPDLimits) Values() [6]*int64 {
	return [6]*int64{l.ConnectionCount, l.ConnectionRate, l.MessageRate, l.RecipientRate, l.NewTLSRate, l.AuthRate}
}

func (c *Config) validateClassAnvil(path string, l SMTPDLimits) []error {
	var errs []error
	smtpd := c.Anvil.SMTPD.Values()
	for i, v := range l.Values() {
		if v == nil {
			continue
		}
		p := path + "." + limitNames[i]
		if *v < 0 {
			errs = append(errs, c.errAt(p, "must not be negative"))
		} else if s := smtpd[i]; s != nil && *s == 0 {
			errs = append(errs, c.errAt(p, "smtpd does not check this figure while smtpd_%s = 0; set anvil.smtpd.%s to main.cf's non-zero value", limitNames[i], limitNames[i]))
		}
	}
	return errs
}

func (c *Config) validateAnvil() []error {
	a := c.Anvil
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	for i, v := range a.SMTPD.Values() {
		p := "anvil.smtpd." + limitNames[i]
		if v == nil {
			add(p, "must be set (to main.cf's smtpd_%s)", limitNames[i])
		} else if *v < 0 {
			add(p, "must not be negative")
		}
	}
	if !a.Enabled {
		return errs
	}
	errs = append(errs, a.Door.validate(c, "anvil", "max_conns", a.MaxConns)...)
	u := a.RateTimeUnit.D()
	if u < time.Second || u%time.Second != 0 {
		add("anvil.rate_time_unit", "must be a whole number of seconds, at least 1s")
	}
	if a.IdleTimeout.D() < 0 || a.RequestTimeout.D() <= 0 {
		add("anvil", "idle_timeout must not be negative and request_timeout must be positive")
	}
	if a.MaxLine < 64 || a.MaxLine > 65536 {
		add("anvil.max_line", "must be between 64 and 65536")
	}
	if cc := a.SMTPD.ConnectionCount; cc != nil && *cc == 0 {
		for i, cl := range c.Classes {
			if cl.Refuse > 0 {
				add(fmt.Sprintf("class[%d].refuse", i+1), "smtpd enforces a class's refuse cap through anvil only while smtpd_client_connection_count_limit > 0; set anvil.smtpd.client_connection_count_limit")
			}
		}
	}
	return errs
}

// ParseListen parses "unix:PATH" or "inet:HOST:PORT" into a network and
// address for net.Listen. An inet host must be given; bind to a
// non-loopback address only on purpose.
func ParseListen(s string) (network, addr string, err error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", fmt.Errorf("%q: want unix:PATH or inet:HOST:PORT", s)
	}
	switch kind {
	case "unix":
		if rest == "" {
			return "", "", fmt.Errorf("%q: empty socket path", s)
		}
		if len(rest) > 104 {
			return "", "", fmt.Errorf("%q: socket path longer than 104 bytes", s)
		}
		return "unix", rest, nil
	case "inet":
		if _, err := strconv.ParseUint(rest, 10, 16); err == nil {
			return "", "", fmt.Errorf("%q: the host is missing: write inet:127.0.0.1:%s (loopback) or inet:0.0.0.0:%s (every address)", s, rest, rest)
		}
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return "", "", fmt.Errorf("%q: %v", s, err)
		}
		if host == "" {
			return "", "", fmt.Errorf("%q: name the host to bind (127.0.0.1 for loopback)", s)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return "", "", fmt.Errorf("%q: invalid port", s)
		}
		return "tcp", rest, nil
	}
	return "", "", fmt.Errorf("%q: unknown kind %q (want unix or inet)", s, kind)
}

// FileMode parses the socket mode.
func (s Socket) FileMode() (uint32, error) {
	v, err := strconv.ParseUint(s.Mode, 8, 32)
	if err != nil || v > 0o777 {
		return 0, fmt.Errorf("mode %q is not an octal permission such as \"0660\"", s.Mode)
	}
	return uint32(v), nil
}

// check returns the first bad field and its problem.
func (s Socket) check() (string, error) {
	if _, err := s.FileMode(); err != nil {
		return "mode", err
	}
	if s.Owner != "" {
		if _, err := user.Lookup(s.Owner); err != nil {
			return "owner", fmt.Errorf("no such user %q", s.Owner)
		}
	}
	if s.Group != "" {
		if _, err := user.LookupGroup(s.Group); err != nil {
			return "group", fmt.Errorf("no such group %q", s.Group)
		}
	}
	return "", nil
}

func (c *Config) validateStore() []error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	errs = append(errs, c.validateSnapshot()...)
	switch c.Store.Kind {
	case "memory":
		return errs
	case "redis":
	default:
		add("store.kind", "%q is not memory or redis", c.Store.Kind)
		return errs
	}
	r := c.Store.Redis
	if len(r.Addrs) == 0 {
		add("store.redis.addrs", "name at least one Redis server (host:port)")
	}
	for i, a := range r.Addrs {
		key := fmt.Sprintf("store.redis.addrs[%d]", i+1)
		if path, ok := RedisUnixPath(a); ok {
			if msg := r.unixAddrProblem(path); msg != "" {
				add(key, "%q: %s", a, msg)
			}
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			add(key, "%q is not host:port or unix:PATH", a)
		}
	}
	if r.Password != "" && r.PasswordFile != "" {
		add("store.redis.password_file", "set password or password_file, not both")
	}
	if r.PasswordFile != "" {
		if _, err := os.Stat(c.Relative(r.PasswordFile)); err != nil {
			add("store.redis.password_file", "%v", err)
		}
	}
	if r.TLSCAFile != "" {
		if !r.TLS {
			add("store.redis.tls_ca_file", "set tls = true to use a CA file")
		} else if _, err := os.Stat(c.Relative(r.TLSCAFile)); err != nil {
			add("store.redis.tls_ca_file", "%v", err)
		}
	}
	if r.DB < 0 || r.DB > 15 && !r.Cluster {
		add("store.redis.db", "must be between 0 and 15")
	}
	if r.Cluster && r.DB != 0 {
		add("store.redis.db", "Redis Cluster has only database 0")
	}
	errs = append(errs, c.validateMasterSet()...)
	if r.KeyPrefix == "" || strings.ContainsAny(r.KeyPrefix, "{}") {
		add("store.redis.key_prefix", "must be non-empty and free of { and } (sluice adds its own hash tags)")
	}
	if d := r.Deadline.D(); d < time.Millisecond || d > 10*time.Second {
		add("store.redis.deadline", "must be between 1ms and 10s (it bounds every decision on the mail path)")
	}
	if r.DialTimeout.D() <= 0 {
		add("store.redis.dial_timeout", "must be positive")
	}
	if r.LeaseTTL.D() < time.Second {
		add("store.redis.lease_ttl", "must be at least 1s")
	}
	switch r.FailMode {
	case "open", "closed":
	default:
		add("store.redis.fail_mode", "%q is not open or closed", r.FailMode)
	}
	switch {
	case r.WaitReplicas < 0:
		add("store.redis.wait_replicas", "must not be negative (0: answer without waiting for replicas)")
	case r.WaitTimeout.D() < 0 || r.WaitTimeout.D() > 0 && r.WaitTimeout.D() >= r.Deadline.D():
		add("store.redis.wait_timeout", "must be positive and shorter than deadline (%s): the wait is part of every decision", r.Deadline.D())
	case r.WaitTimeout.D() > 0 && r.WaitReplicas == 0:
		add("store.redis.wait_timeout", "set wait_replicas to wait for replicas")
	}
	return errs
}
