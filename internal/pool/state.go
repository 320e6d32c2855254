package pool

import (
	"errors"
	"strings"
)

// State is a worker slot's state, as mimedefang-multiplexor shows it.
type State int

// The four slot states.
const (
	Stopped State = iota // no process
	Idle                 // the process waits for a command
	Busy                 // the process is handling a command
	Killed               // the process was told to exit and is not reaped yet
)

// Letter is the state's letter in the `status` reply: S, I, B or K.
func (s State) Letter() byte { return "SIBK"[s] }

// String is the state's name: Stopped, Idle, Busy or Killed.
func (s State) String() string {
	return [...]string{"Stopped", "Idle", "Busy", "Killed"}[s]
}

// Kind classifies a command for worker choice and the load statistics.
type Kind int

// The command kinds. Only Scan, RelayOK, SenderOK and RecipOK are
// counted in the load histories and remembered as a worker's last command.
const (
	Other Kind = iota
	Scan
	RelayOK
	SenderOK
	RecipOK
	nkinds
)

// Name is the command word of a counted kind ("" for Other).
func (k Kind) Name() string {
	return [...]string{"", "scan", "relayok", "senderok", "recipok"}[k]
}

// KindOf classifies a command line by its prefix including the space
// ("scan ", "relayok ", ...), as the reference does.
func KindOf(line string) Kind {
	for k := Scan; k < nkinds; k++ {
		if strings.HasPrefix(line, k.Name()+" ") {
			return k
		}
	}
	return Other
}

// Errors a request can end with instead of a worker's reply. The mux and
// socketmap front ends turn them into their protocols' reply strings.
var (
	// ErrNoFreeWorkers: no worker could be chosen and the request could not
	// be queued (no queue, queue full, or not queueable).
	ErrNoFreeWorkers = errors.New("pool: no free workers")
	// ErrActivate: a stopped slot was chosen but its process could not be
	// started (-W spacing, fork or exec failure).
	ErrActivate = errors.New("pool: unable to activate worker")
	// ErrTalk: writing the command to the worker failed or timed out.
	ErrTalk = errors.New("pool: error talking to worker process")
	// ErrNoResponse: the worker closed its stdout without a byte of reply.
	ErrNoResponse = errors.New("pool: no response from worker")
	// ErrBusyTimeout: the worker did not answer within the busy timeout.
	// Result.BusyWorkers says how many workers were busy at that moment.
	ErrBusyTimeout = errors.New("pool: busy timeout")
	// ErrQueueTimeout: the request waited in the queue for the whole queue
	// timeout.
	ErrQueueTimeout = errors.New("pool: queued request timed out")
	// ErrDomainLimit: a recipok for a domain already at the per-domain cap.
	ErrDomainLimit = errors.New("pool: per-domain recipok limit hit")
	// ErrClosed: the pool is shutting down (clients see EOF).
	ErrClosed = errors.New("pool: closed")
)

// RecipokDomain is the domain the per-domain recipok cap counts for line:
// the text after the first '@' up to the next '>', space or end of line,
// at most 127 bytes. ok is false when the line has no '@': no cap applies.
func RecipokDomain(line string) (domain string, ok bool) {
	i := strings.IndexByte(line, '@')
	if i < 0 {
		return "", false
	}
	d := line[i+1:]
	if j := strings.IndexAny(d, "> "); j >= 0 {
		d = d[:j]
	}
	if len(d) > 127 {
		d = d[:127]
	}
	return d, true
}
