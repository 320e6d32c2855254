// Package status is the daemon's state at one moment as plain data: what
// the web status page shows, what /status.json carries and what
// `sluice status` reads back. It imports nothing of sluice, so the daemon
// fills it (internal/app) and the front ends show it (internal/web)
// without depending on each other's packages.
//
// Nothing secret belongs here: no passwords, no store addresses with
// credentials, no config file contents. The web server also scrubs
// credentials from URLs in free text before serving (see web), but the
// filler is the first line of defence.
package status

import "time"

// Status is everything the status page shows. Lists are already sorted
// and short: the server trims them to its own caps.
type Status struct {
	Version string    `json:"version,omitempty"` // sluice's version
	Now     time.Time `json:"now"`               // when the facts were taken
	Started time.Time `json:"started,omitzero"`  // when the daemon started
	Reload  Reload    `json:"reload,omitzero"`   // the configuration in force
	Store   *Store    `json:"store,omitempty"`   // the limiter store
	Doors   []Door    `json:"doors,omitempty"`   // the services listening
	Pool    *Pool     `json:"pool,omitempty"`    // the worker pool, if there is one
	// PoolError is why the pool of [web] mux_socket cannot be read, with
	// what to change (a permission error names the socket to use: the
	// multiplexor's unprivileged -a socket); empty when it was read.
	PoolError string  `json:"pool_error,omitempty"`
	Classes   []Class `json:"classes,omitempty"` // in class-table order
	// MTA is the MTA's sessions against its capacity and the classes'
	// reservations; nil when the classes count no session.
	MTA *MTA `json:"mta,omitempty"`
	// Escalation is what the escalation to the kernel did ([mta.escalate]);
	// nil when it is off.
	Escalation *Escalation `json:"escalation,omitempty"`
	// Talkers are the busiest keys, highest rate first.
	Talkers []Talker `json:"talkers,omitempty"`
	// Refusals are the most recent refusals, newest first.
	Refusals []Refusal `json:"refusals,omitempty"`
	// ThrottleKeys are the throttle keys not in their normal state
	// (suspended after a ban, or sending at a learned limit), by key.
	ThrottleKeys []ThrottleKey `json:"throttle_keys,omitempty"`
	// Totals are running counts since start; the web server turns their
	// growth into per-second rates for History.
	Totals Totals `json:"totals"`
	// History is filled by the web server, oldest first; a Source leaves
	// it nil.
	History []Sample `json:"history,omitempty"`
}

// Reload describes the configuration in force.
type Reload struct {
	Generation int       `json:"generation"`      // 1 for the initial load, +1 per successful reload
	At         time.Time `json:"at,omitzero"`     // when it was loaded
	LastFailed time.Time `json:"failed,omitzero"` // the last failed reload, if after At
}

// Store describes the limiter store, never its address or credentials.
type Store struct {
	Backend string `json:"backend"`            // "memory" or "redis"
	Keys    int64  `json:"keys"`               // keys held now
	MaxKeys int64  `json:"max_keys,omitempty"` // the key cap (0: none or unknown)
	Healthy bool   `json:"healthy"`            // the last operation succeeded
	// Degraded says why the state the last run left was not restored
	// (a state file unreadable, another user's, refused); "" when it was.
	Degraded string `json:"degraded,omitempty"`
}

// Door is one service of the daemon.
type Door struct {
	Name   string   `json:"name"`             // policy, anvil, throttle, milter, mux, web...
	Listen []string `json:"listen,omitempty"` // listen specs as configured
	Conns  int      `json:"conns"`            // open connections
}

// Pool is the worker pool as md-mx-ctrl shows it.
type Pool struct {
	Slots       []Slot  `json:"slots"`                    // every slot, by number
	Queued      int     `json:"queued"`                   // requests waiting for a worker
	QueueSize   int     `json:"queue_size"`               // the queue's capacity
	Msgs        int64   `json:"msgs"`                     // messages scanned since start
	Activations uint64  `json:"activations"`              // workers started since start
	BusyTimeout float64 `json:"busy_timeout_s,omitempty"` // seconds; 0: none
}

// Slot states, as mimedefang-multiplexor's status letters.
const (
	SlotStopped = "S"
	SlotIdle    = "I"
	SlotBusy    = "B"
	SlotKilled  = "K"
)

// Slot is one worker slot.
type Slot struct {
	State    string    `json:"state"`          // one of the Slot constants
	PID      int       `json:"pid,omitempty"`  // 0 when stopped
	Cmd      string    `json:"cmd,omitempty"`  // the command kind now (busy) or last
	Tag      string    `json:"tag,omitempty"`  // the worker's status tag
	Requests int       `json:"requests"`       // requests this process served
	Since    time.Time `json:"since,omitzero"` // when the slot entered its state
}

// Class is one peer class's occupancy against its caps (0: no cap).
type Class struct {
	Name        string `json:"name"`
	Incoming    int64  `json:"incoming"`               // open incoming sessions
	Total       int64  `json:"total"`                  // open sessions either way
	IncomingCap int64  `json:"incoming_cap,omitempty"` // refuse
	TotalCap    int64  `json:"total_cap,omitempty"`    // queue
	Reserve     int64  `json:"reserve,omitempty"`      // its reservation of the MTA's sessions
	// ReserveUnused is the part of the reservation its sessions leave
	// free (kept from the other classes).
	ReserveUnused int64 `json:"reserve_unused,omitempty"`
}

// MTA is the MTA's SMTP sessions as sluice counts them.
type MTA struct {
	Capacity int64  `json:"capacity,omitempty"` // sessions it serves at once (0: unknown)
	From     string `json:"from,omitempty"`     // where the capacity was found
	Open     int64  `json:"open"`               // every class's open sessions
	Reserved int64  `json:"reserved,omitempty"` // the classes' reservations, summed
	// ReservedUnused are the reserved sessions their classes do not use.
	ReservedUnused int64 `json:"reserved_unused,omitempty"`
	// Free are the sessions neither open nor reserved: what a class
	// beyond its reservation may still open (0 without a capacity).
	Free int64 `json:"free"`
	// Share is the fair share of the classes without a reservation (nil
	// without a capacity).
	Share *Share `json:"share,omitempty"`
}

// Share is how the classes without a reservation share the sessions
// nobody reserved among their networks (IPv4 /24, IPv6 /48).
type Share struct {
	Budget   int64 `json:"budget"`   // the sessions they hold before each network is held to a share
	Networks int   `json:"networks"` // networks holding their sessions
	Sessions int64 `json:"sessions"` // those networks' sessions
	Largest  int64 `json:"largest"`  // the most one network holds
	PerNet   int64 `json:"per_net"`  // each network's share now; 0 while everyone fits
	// Busy is the networks refused a session, or admitted one beyond
	// their first, in the last minute: past the budget they get none, the
	// rest is kept for the others.
	Busy int `json:"busy_networks"`
}

// Escalation is the addresses handed to the kernel, through the
// escalation helper, after their sessions were refused again and again.
type Escalation struct {
	Dropping  int    `json:"dropping"`        // addresses whose connections the kernel drops now
	Tracked   int    `json:"tracked"`         // addresses whose refused sessions are counted
	Added     uint64 `json:"added"`           // addresses the helper added since the start
	Failed    uint64 `json:"failed"`          // requests the helper did not carry out
	QueueFull uint64 `json:"queue_full"`      // escalations dropped before reaching the helper
	Error     string `json:"error,omitempty"` // the helper's last failure, while it lasts
	Socket    string `json:"socket"`          // the helper's socket
}

// Talker is one busy key under a rate rule.
type Talker struct {
	Rule   string  `json:"rule"`             // the rule's name
	Key    string  `json:"key"`              // what it counts by (a client, a sender...)
	Count  int64   `json:"count"`            // events in the current window
	Limit  int64   `json:"limit,omitempty"`  // the rule's limit per Period
	Period string  `json:"period,omitempty"` // the window, as the config writes it ("1m")
	Rate   float64 `json:"rate"`             // events per second
}

// Refusal is one refusal and why.
type Refusal struct {
	At        time.Time `json:"at"`                  // when
	Door      string    `json:"door"`                // the door that refused (policy, anvil, milter, throttle)
	Rule      string    `json:"rule"`                // the rule's name ("class" for a class cap)
	Key       string    `json:"key"`                 // the key over its limit (the class's name for a class cap)
	Count     int64     `json:"count"`               // its count then
	Limit     int64     `json:"limit"`               // the limit per Period
	Period    string    `json:"period,omitempty"`    // the window, as the config writes it
	Algorithm string    `json:"algorithm,omitempty"` // anvil, exact, smooth, concurrency...
	Verdict   string    `json:"verdict"`             // what the peer was told (DEFER, 421...)
	Reply     string    `json:"reply,omitempty"`     // the reply text, if any
	// Reason says why in one word: limit, class, max_wait, ban, suspended,
	// fail_closed, untrusted_report.
	Reason string `json:"reason,omitempty"`
}

// Totals are running counts since the daemon started.
type Totals struct {
	Decisions uint64 `json:"decisions"` // every verdict given
	Refusals  uint64 `json:"refusals"`  // those that refused (dry runs not counted)
	// Doors counts the verdicts by door and verdict, in the words of
	// sluice_decisions_total's verdict label (ok, refused, deferred,
	// dry_run): the same counts as the metric's, summed over rules.
	Doors map[string]map[string]uint64 `json:"doors,omitempty"`
}

// Sample is one point of the short history.
type Sample struct {
	T         int64   `json:"t"`         // Unix milliseconds
	Busy      int     `json:"busy"`      // busy workers
	Slots     int     `json:"slots"`     // worker slots
	Decisions float64 `json:"decisions"` // per second since the previous sample
	Refusals  float64 `json:"refusals"`  // per second since the previous sample
}

// ThrottleKey is the state of one throttle key (a policy's budget) that
// a relay's ban or throttling answers changed.
type ThrottleKey struct {
	Key            string    `json:"key"`                        // the policy's name, a space, the key or "*" when shared
	SuspendedUntil time.Time `json:"suspended_until,omitzero"`   // zero: not suspended
	Bans           int64     `json:"bans,omitempty"`             // bans in a row (the cool-off doubles with each)
	Limit          int64     `json:"limit,omitempty"`            // the learned limit (0: the configured one)
	Configured     int64     `json:"configured_limit,omitempty"` // the configured limit
	Period         string    `json:"period,omitempty"`           // the limit's window, as configured
}
