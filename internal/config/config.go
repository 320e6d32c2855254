// Package config is sluice's configuration: the TOML schema, strict
// decoding (unknown keys are errors), the defaults in one place, and
// Validate, which reports every problem with its file and line.
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Config is the whole configuration file. Run as root (sluice serve
// before it becomes user, or sluice check), sluice reads this file, the
// files of include_dir, classes_file and the rules' tables only if each
// belongs to root and is not writable by group or others, and so is
// every directory on its path (a sticky one such as /tmp may be
// writable); the Redis password and CA files may also belong to user.
// Otherwise it refuses to start, and check exits 1, naming the path, its
// owner and its mode.
type Config struct {
	// StateDir holds what sluice keeps between runs. It is created (mode
	// 0750, owned by user) if missing. A directory that exists is used
	// as it is, and given to user only when it is the default one
	// (/var/lib/sluice, or systemd's StateDirectory=): a root start
	// refuses one user cannot write in. The -state-dir flag overrides it.
	StateDir string `toml:"state_dir"`
	// RuntimeDir holds sluice's unix sockets when their paths are
	// relative. It is created (mode 0755: each socket has its own owner,
	// group and mode) if missing; one that exists is treated as state_dir
	// is (given to user only if it is /run/sluice or systemd's
	// RuntimeDirectory=). Unset, it is /run/sluice for root and
	// $XDG_RUNTIME_DIR/sluice for other users; but when state_dir is set
	// and runtime_dir is not, the sockets stay in state_dir.
	RuntimeDir string `toml:"runtime_dir"`
	// User is the account sluice runs as. Started as root, it binds its
	// sockets and prepares its directories, then switches to this user
	// and its groups for good. Empty: it keeps the user it was started as
	// (under systemd, the unit's User=).
	User string `toml:"user"`
	// ClassesFile is an XLA-style class table ("mask queue refuse" lines);
	// its classes come after the [[class]] tables. A relative path is
	// relative to the config file.
	ClassesFile string `toml:"classes_file"`
	// IncludeDir names a directory of *.toml files merged after this one,
	// in name order (e.g. "/etc/sluice/conf.d"; relative to this file):
	// tables merge key by key, a later value replaces an earlier one, and
	// [[class]], [[policy.rule]] and [[throttle.policy]] merge by name (a
	// new class goes before the catch-all "*" class, so after the main
	// file's: sluice check warns when an earlier class takes all or some
	// of its peers, and says where each class came from). Only the main
	// file may set it; relative paths in every file are relative to the
	// main one.
	IncludeDir string `toml:"include_dir"`
	// Procs is how many threads run sluice's Go code at once (Go's
	// GOMAXPROCS); 0 is Go's default, one per CPU the process may use. The
	// doors' work per request is a few microseconds of decision and the
	// socket's system calls, which one thread serves with the least
	// switching between threads and the fairest order: on a 2-CPU host
	// shared with the clients, one thread answered more policy requests a
	// second than two, at a third of the 99th-percentile latency. Raise it
	// when one thread is busy (process_cpu_seconds_total rising by about 1
	// a second; with a million keys in the memory store one thread still
	// kept up). A count in the GOMAXPROCS environment variable wins.
	// Applies at a restart.
	Procs    int      `toml:"procs"`
	Log      Log      `toml:"log"`
	Limiter  Limiter  `toml:"limiter"`
	Store    Store    `toml:"store"`
	Classes  []Class  `toml:"class"`
	MTA      MTA      `toml:"mta"`
	Anvil    Anvil    `toml:"anvil"`
	Policy   Policy   `toml:"policy"`
	Throttle Throttle `toml:"throttle"`
	Milter   Milter   `toml:"milter"`
	Web      Web      `toml:"web"`
	Control  Control  `toml:"control"`

	// File is the path the config was read from ("" for the defaults).
	File string `toml:"-"`
	// Included are the files of IncludeDir merged after File, in order.
	Included []string `toml:"-"`
	// lines maps key paths ("class[1].refuse") to their line in File, or
	// in the included file from names.
	lines map[string]int
	// tables holds the limit tables the rules name, each read once per
	// Config: what Validate checked is what the governor uses.
	tables *tableCache
	// from maps the key paths set by an included file to that file.
	from map[string]string
	// added maps the entries of named arrays ("class[3]") that an
	// included file added, rather than changed, to that file.
	added map[string]string
}

// Log configures logging.
type Log struct {
	Level  string `toml:"level"`  // debug, info, warn, error
	Format string `toml:"format"` // text or json (stderr only)
	// Output is where the log goes: "stderr" (the journal under systemd)
	// or "syslog" (the local syslog socket, lines "message key=value").
	Output string `toml:"output"`
	// Facility is the syslog facility: mail, daemon, local0 ... local7, ...
	Facility string `toml:"facility"`
	// Tag is the syslog ident, shown with the pid.
	Tag string `toml:"tag"`
	// SyslogSocket is the local syslog daemon's datagram socket.
	SyslogSocket string `toml:"syslog_socket"`
	// MaxLinesPerSecond caps the lines logged a second, whatever their
	// level (0: no cap); lines over it are dropped, and one line says how
	// many. Refusals are already summarized per key and rule.
	MaxLinesPerSecond int `toml:"max_lines_per_second"`
}

// Limiter configures the limiter core and its in-memory store.
type Limiter struct {
	// MaxKeys caps the keys the memory store holds. A key takes about 85
	// bytes plus its length (a sender key of 40 bytes: 125 bytes), so the
	// default of 10,000,000 is about 1.3 GB at most; memory is taken as
	// keys arrive (docs/limiter.md, "Sizing max_keys").
	MaxKeys int `toml:"max_keys"`
	// WhenFull is what a new key gets when the store is full of keys still
	// counting (keys at rest always make room, and a key still counting is
	// never dropped for a new one): "evict" or "fail-open" admit it
	// untracked, "fail-closed" refuses it.
	WhenFull string `toml:"when_full"`
	// StatusInterval is how often peak figures are logged (anvil's
	// anvil_status_update_time).
	StatusInterval Duration `toml:"status_interval"`
}

// Store chooses where counts live.
type Store struct {
	// Kind is "memory" (this process; the default) or "redis" (shared by
	// every sluice that uses the same Redis).
	Kind     string   `toml:"kind"`
	Redis    Redis    `toml:"redis"`
	Snapshot Snapshot `toml:"snapshot"`
}

// Redis configures the shared store.
type Redis struct {
	// Addrs are host:port of the server, of cluster nodes, or of the
	// Sentinels (with master_set); or "unix:PATH", the absolute path of one
	// server's unix socket (its unixsocketperm and group decide who else
	// may connect).
	Addrs []string `toml:"addrs"`
	// Username is the Redis ACL user sluice authenticates as (AUTH
	// username password; Redis 6 and later); empty for the default user.
	// docs/redis.md gives the ACL that limits it to key_prefix.
	Username string `toml:"username"`
	// Password, or PasswordFile naming a file that holds it (better: the
	// config file stays free of secrets).
	Password string `toml:"password"`
	// PasswordFile names a file holding the password (first line); relative to
	// the config file. Started as root, sluice refuses it unless it belongs
	// to root or user and is writable by neither group nor others; only root
	// and sluice's user should read it (root:sluice 0640): sluice check and
	// serve warn otherwise.
	PasswordFile string `toml:"password_file"`
	// DB is the database number (0-15; Cluster has only 0).
	DB int `toml:"db"`
	// TLS connects with TLS.
	TLS bool `toml:"tls"`
	// TLSCAFile is a PEM file of CAs to trust instead of the system's.
	TLSCAFile string `toml:"tls_ca_file"`
	// TLSServerName is the name expected in the server's certificate (default:
	// the host of the address).
	TLSServerName string `toml:"tls_server_name"`
	// Cluster talks to a Redis Cluster (Addrs are seed nodes).
	Cluster bool `toml:"cluster"`
	// MasterSet names the master set Redis Sentinel watches: Addrs are then
	// the Sentinels, and sluice follows the master they elect through a
	// failover. Empty: Addrs are Redis servers.
	MasterSet string `toml:"master_set"`
	// SentinelUsername is the user for the Sentinels' ACLs, when they have
	// them (username and password are for the master).
	SentinelUsername string `toml:"sentinel_username"`
	// SentinelPassword authenticates to the Sentinels when they require it
	// (their requirepass).
	SentinelPassword string `toml:"sentinel_password"`
	// SentinelPasswordFile names a file holding the Sentinels' password
	// (first line); relative to the config file.
	SentinelPasswordFile string `toml:"sentinel_password_file"`
	// KeyPrefix starts every key sluice writes, so several uses can share one
	// Redis.
	KeyPrefix string `toml:"key_prefix"`
	// Deadline bounds each decision; past it the fail mode applies.
	Deadline Duration `toml:"deadline"`
	// DialTimeout bounds connecting to Redis.
	DialTimeout Duration `toml:"dial_timeout"`
	// LeaseTTL is how long a dead host's concurrency slots outlive it.
	LeaseTTL Duration `toml:"lease_ttl"`
	// FailMode is "open" (admit, and log) or "closed" (tempfail) while
	// Redis cannot decide in time. The throttle door defers under both: a
	// send without a booked slot is what gets a host banned, and a deferred
	// mail waits in the queue.
	FailMode string `toml:"fail_mode"`
	// WaitReplicas is how many replicas must hold a decision's write
	// (Redis WAIT) before the decision is answered. With 1 or more a
	// Sentinel or Cluster failover loses no acknowledged count, so limits
	// stay exact across it; a write the replicas do not acknowledge within
	// wait_timeout gets the fail mode. It costs a replication round trip
	// on every decision (docs/redis.md measures it). 0 (the default)
	// answers at once, and a failover may lose the decisions in flight
	// and what the replica lagged behind.
	WaitReplicas int `toml:"wait_replicas"`
	// WaitTimeout bounds that wait (default half of deadline; it must be
	// shorter than deadline).
	WaitTimeout Duration `toml:"wait_timeout"`
}

// Class is one [[class]] table.
type Class struct {
	// Name names the class in logs, rules (class matchers) and the status
	// page.
	Name string `toml:"name"`
	// Match lists host masks: "host.example.org", "*.example.org", "*",
	// "192.0.2.0/24", "2001:db8::/32". The first class with a matching
	// mask wins: sluice check warns of a mask an earlier class's mask
	// covers (a network inside its network, a name under its domain),
	// since it never matches.
	Match []string `toml:"match"`
	// Refuse caps incoming sessions of the class (0: no cap).
	Refuse int64 `toml:"refuse"`
	// Queue caps all sessions of the class, incoming and outgoing (0: no cap).
	Queue int64 `toml:"queue"`
	// Reserve keeps this many of the MTA's SMTP sessions ([mta]) for the
	// class: a session of another class is refused when admitting it would
	// leave fewer free sessions than the reservations not in use, so the
	// class can always open Reserve sessions whatever the others hold
	// (0: none). The reservations together must stay below the capacity.
	// Only [[class]] carries it; a classes_file class has none.
	Reserve int64 `toml:"reserve"`
	// Anvil overrides smtpd's client limits for this class.
	Anvil SMTPDLimits `toml:"anvil"`
}

// MTA describes the mail server sluice guards: how many SMTP sessions it
// serves at once (its capacity), which the classes' reservations divide.
type MTA struct {
	// Sessions is the number of SMTP sessions the MTA serves at once
	// (0: read it from the MTA). Sendmail: MaxDaemonChildren from
	// sendmail_cf when set; Postfix: the smtpd process limits of
	// master.cf, read through postconf when anvil.postfix_config_dir is
	// set. Set it when the MTA's own figure is not the one to divide, or
	// to check a configuration without the MTA's files.
	Sessions int64 `toml:"sessions"`
	// SendmailCF is Sendmail's configuration file, whose MaxDaemonChildren
	// is the capacity when sessions is 0 (relative: to this file's
	// directory). It wins over anvil.postfix_config_dir.
	SendmailCF string `toml:"sendmail_cf"`
	// Escalate hands the addresses refused again and again to the kernel.
	Escalate Escalate `toml:"escalate"`
}

// SMTPDLimits are smtpd's anvil-enforced limits (main.cf names without
// "smtpd_"). In [anvil.smtpd] they must equal main.cf; in a class they
// override it (absent: smtpd's value; 0: no cap).
type SMTPDLimits struct {
	// ConnectionCount is smtpd_client_connection_count_limit: concurrent
	// sessions per client.
	ConnectionCount *int64 `toml:"client_connection_count_limit"`
	// ConnectionRate is smtpd_client_connection_rate_limit: connections per
	// client per rate_time_unit.
	ConnectionRate *int64 `toml:"client_connection_rate_limit"`
	// MessageRate is smtpd_client_message_rate_limit: MAIL FROM commands per
	// client per unit.
	MessageRate *int64 `toml:"client_message_rate_limit"`
	// RecipientRate is smtpd_client_recipient_rate_limit: RCPT TO and VRFY per
	// client per unit.
	RecipientRate *int64 `toml:"client_recipient_rate_limit"`
	// NewTLSRate is smtpd_client_new_tls_session_rate_limit: new TLS sessions
	// per client per unit.
	NewTLSRate *int64 `toml:"client_new_tls_session_rate_limit"`
	// AuthRate is smtpd_client_auth_rate_limit: AUTH commands per client per
	// unit.
	AuthRate *int64 `toml:"client_auth_rate_limit"`
}

// Anvil configures the anvil(8) service.
type Anvil struct {
	// Enabled serves the anvil protocol.
	Enabled bool `toml:"enabled"`
	Door
	// Announce sends "protocol=anvil_protocol" first (Postfix >= 3.6).
	Announce bool `toml:"announce"`
	// RateTimeUnit is Postfix's anvil_rate_time_unit: the window of every rate
	// (whole seconds).
	RateTimeUnit Duration `toml:"rate_time_unit"`
	// MaxConns caps open client connections.
	MaxConns int `toml:"max_conns"`
	// IdleTimeout closes a connection idle this long (0: never).
	IdleTimeout Duration `toml:"idle_timeout"`
	// RequestTimeout bounds reading one request once it has started.
	RequestTimeout Duration `toml:"request_timeout"`
	// MaxLine caps one request line (bytes).
	MaxLine int `toml:"max_line"`
	// SMTPD holds smtpd's limits as set in main.cf.
	SMTPD SMTPDLimits `toml:"smtpd"`
	// ClassCaps enforces the classes' refuse caps at anvil's connect.
	// false leaves them to the milter door (anvil keeps its counts and
	// rates): for a milter on TCP, where sluice cannot tell that the two
	// doors see one SMTP session. Over unix sockets both doors find the
	// session by smtpd's process id and it holds one slot either way.
	ClassCaps bool `toml:"class_caps"`
	// PostfixConfigDir is Postfix's configuration directory (e.g.
	// "/etc/postfix"): check and the start compare the smtpd_client_*
	// limits of its main.cf (as postconf reports them) with [anvil.smtpd]
	// and rate_time_unit, and warn on any difference. Empty: not compared.
	PostfixConfigDir string `toml:"postfix_config_dir"`
}

// Policy configures the Postfix policy delegation service.
type Policy struct {
	// Enabled serves Postfix policy delegation.
	Enabled bool `toml:"enabled"`
	Door
	// MaxConns caps open client connections.
	MaxConns int `toml:"max_conns"`
	// IdleTimeout closes a connection idle this long (0: never).
	IdleTimeout Duration `toml:"idle_timeout"`
	// RequestTimeout bounds reading one request once it has started.
	RequestTimeout Duration `toml:"request_timeout"`
	// MaxLine caps one attribute line (bytes).
	MaxLine int `toml:"max_line"`
	// MaxAttrs caps the attributes of one request.
	MaxAttrs int `toml:"max_attrs"`
	// MaxRequest caps one request (bytes).
	MaxRequest int `toml:"max_request"`
	// DefaultAction answers requests no rule refuses (normally DUNNO).
	DefaultAction string       `toml:"default_action"`
	Rules         []PolicyRule `toml:"rule"`
}

// PolicyRule is one [[policy.rule]]: which requests it applies to, what it
// counts under which key, its limits and its answer when over.
type PolicyRule struct {
	// Name names the rule in logs, replies ({rule}) and keys; it must be
	// unique.
	Name string `toml:"name"`

	// ClientAddress matches client_address against networks ("192.0.2.0/24",
	// "2001:db8::/32").
	ClientAddress []string `toml:"client_address"`
	// ClientName matches client_name against host masks ("mx.example.org",
	// "*.example.org").
	ClientName []string `toml:"client_name"`
	// ReverseClientName matches reverse_client_name against host masks.
	ReverseClientName []string `toml:"reverse_client_name"`
	// HeloName matches helo_name against host masks.
	HeloName []string `toml:"helo_name"`
	// Sender matches the envelope sender address (case-insensitive; "<>" is
	// the null sender).
	Sender []string `toml:"sender"`
	// SenderDomain matches the sender's domain against host masks.
	SenderDomain []string `toml:"sender_domain"`
	// Recipient matches the recipient address (case-insensitive).
	Recipient []string `toml:"recipient"`
	// RecipientDomain matches the recipient's domain against host masks.
	RecipientDomain []string `toml:"recipient_domain"`
	// SASLUsername matches the SASL login name; "*" matches any authenticated
	// client.
	SASLUsername []string `toml:"sasl_username"`
	// PolicyContext matches policy_context (Postfix's
	// smtpd_policy_service_policy_context; "milter" for the milter door).
	PolicyContext []string `toml:"policy_context"`
	// ProtocolState matches protocol_state (CONNECT, EHLO, MAIL, RCPT, DATA,
	// END-OF-MESSAGE, VRFY, ETRN).
	ProtocolState []string `toml:"protocol_state"`
	// Class matches the class the client falls in.
	Class []string `toml:"class"`

	// Key lists the attributes whose values make the key.
	Key []string `toml:"key"`
	// Count is messages, recipients, connections or bytes.
	Count string `toml:"count"`
	// Stage is where messages or recipients are counted: RCPT, DATA or
	// END-OF-MESSAGE (the default).
	Stage string `toml:"stage"`
	// Limit lists "N/PERIOD [algorithm] [burst=B]" limits, all applied.
	Limit []string `toml:"limit"`
	// Mode is leaky (default) or strict.
	Mode string `toml:"mode"`
	// Action is the reply when over a limit: an access(5) verb
	// (DEFER_IF_PERMIT, DEFER, REJECT, WARN, ...) or "4xx/5xx text", with
	// {rule} {key} {count} {limit} {period} {algorithm} {retry}.
	Action string `toml:"action"`
	// DryRun answers WARN instead of refusing, and lets the mail pass (it is
	// still counted).
	DryRun bool `toml:"dry_run"`
	// Rollback takes back RCPT-stage counts of a transaction that never
	// reached END-OF-MESSAGE (Postfix must also call the policy service at
	// END-OF-MESSAGE).
	Rollback bool `toml:"rollback"`
	// Table names a per-key limit table: one key per line (the rule's key
	// values, joined by "," when it has several parts), then its limits
	// ("20/1h", "100/1h, 1000/1d smooth"), which replace the rule's limit
	// for that key, or "exempt" (the key is not counted). Read again at
	// every reload; a relative path is relative to the config file.
	Table string `toml:"table"`
}

// Socket sets owner, group and mode of unix sockets sluice creates.
type Socket struct {
	// Owner is the user that owns the socket (e.g. "postfix"); empty keeps
	// sluice's.
	Owner string `toml:"owner"`
	// Group is the socket's group; empty keeps sluice's.
	Group string `toml:"group"`
	Mode  string `toml:"mode"` // octal, e.g. "0660"
}

// Duration is a time.Duration written as "60s", "10m" or "1h30m".
type Duration time.Duration

// UnmarshalText parses a Go duration; a bare number is seconds, as in
// Postfix.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s != "" && strings.Trim(s, "0123456789") == "" {
		s += "s"
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q (use e.g. \"60s\", \"10m\", \"1h\")", string(b))
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the duration as Go does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func ptr(v int64) *int64 { return &v }

// Default returns the embedded defaults: in-memory store, the anvil
// service on a unix socket under the state directory.
func Default() *Config {
	return &Config{
		Procs:    1,
		tables:   &tableCache{},
		StateDir: DefaultStateDir(),
		Log: Log{Level: "info", Format: "text", Output: "stderr", Facility: "mail", Tag: "sluice", SyslogSocket: "/dev/log",
			MaxLinesPerSecond: 200},
		Limiter: Limiter{
			MaxKeys:        10_000_000,
			WhenFull:       "evict",
			StatusInterval: Duration(10 * time.Minute),
		},
		Store: Store{
			Kind: "memory",
			Redis: Redis{
				Addrs:       []string{"127.0.0.1:6379"},
				KeyPrefix:   "sluice:",
				Deadline:    Duration(50 * time.Millisecond),
				DialTimeout: Duration(2 * time.Second),
				LeaseTTL:    Duration(60 * time.Second),
				FailMode:    "open",
			},
			Snapshot: defaultSnapshot(),
		},
		Anvil: Anvil{
			Enabled:        true,
			Door:           defaultDoor("anvil"),
			Announce:       true,
			RateTimeUnit:   Duration(60 * time.Second),
			MaxConns:       4096,
			IdleTimeout:    Duration(time.Hour),
			RequestTimeout: Duration(10 * time.Second),
			MaxLine:        1024,
			SMTPD:          defaultSMTPD(),
			ClassCaps:      true,
		},
		Policy: Policy{
			Enabled:        true,
			Door:           defaultDoor("policy"),
			MaxConns:       4096,
			IdleTimeout:    Duration(time.Hour),
			RequestTimeout: Duration(10 * time.Second),
			MaxLine:        16 << 10,
			MaxAttrs:       128,
			MaxRequest:     128 << 10,
			DefaultAction:  "DUNNO",
		},
		Throttle: Throttle{
			Enabled:        true,
			Door:           defaultDoor("throttle"),
			MaxConns:       4096,
			RequestTimeout: Duration(10 * time.Second),
		},
		MTA:     MTA{Escalate: defaultEscalate()},
		Milter:  defaultMilter(),
		Web:     defaultWeb(),
		Control: defaultControl(),
	}
}

func defaultSMTPD() SMTPDLimits {
	return SMTPDLimits{
		ConnectionCount: ptr(50),
		ConnectionRate:  ptr(0),
		MessageRate:     ptr(0),
		RecipientRate:   ptr(0),
		NewTLSRate:      ptr(0),
		AuthRate:        ptr(0),
	}
}

// DefaultStateDir is the directory systemd made for the service
// ($STATE_DIRECTORY, from StateDirectory=), else /var/lib/sluice for
// root, and $XDG_STATE_HOME/sluice (~/.local/state/sluice) for other users.
func DefaultStateDir() string {
	if d := systemdDir("STATE_DIRECTORY"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/sluice"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sluice")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "sluice")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("sluice-%d", os.Getuid()))
}

// Relative resolves a file named in the config: relative paths are
// relative to the config file's directory.
func (c *Config) Relative(p string) string {
	if p == "" || filepath.IsAbs(p) || c.File == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.File), p)
}

// DefaultRuntimeDir is where the sockets of a daemon started with the
// default state directory live: the directory systemd made for the
// service ($RUNTIME_DIRECTORY, from RuntimeDirectory=), else /run/sluice
// for root, else $XDG_RUNTIME_DIR/sluice, else the default state
// directory.
func DefaultRuntimeDir() string {
	if d := systemdDir("RUNTIME_DIRECTORY"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/sluice"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "sluice")
	}
	return DefaultStateDir()
}

// SocketDir is the directory of the sockets whose paths are relative:
// runtime_dir; unset, state_dir when that is not the default; else
// DefaultRuntimeDir.
func (c *Config) SocketDir() string {
	switch {
	case c.RuntimeDir != "":
		return c.RuntimeDir
	case c.StateDir != DefaultStateDir():
		return c.StateDir
	default:
		return DefaultRuntimeDir()
	}
}

// StatePath resolves a state file's path: relative paths are under
// StateDir.
func (c *Config) StatePath(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.StateDir, p)
}

// Path resolves a socket path: relative paths are under SocketDir.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.SocketDir(), p)
}

// systemdDir is the first directory of a colon-separated list systemd
// passes in the environment variable name, or "".
func systemdDir(name string) string {
	d, _, _ := strings.Cut(os.Getenv(name), ":")
	if !filepath.IsAbs(d) {
		return ""
	}
	return d
}
