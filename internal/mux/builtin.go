package mux

import (
	"fmt"
	"strings"

	"sluice/internal/pool"
)

// answer is how the multiplexor answers a built-in command: a fixed
// reply, or a view of a pool snapshot (with the load windows qs) appended
// to a buffer, which is "" (the connection closed without a byte) once
// the pool has stopped.
type answer struct {
	reply string
	view  func(b []byte, sn *pool.Snapshot) []byte
	qs    []pool.LoadQuery
}

// builtin answers line now if it is a built-in command.
func (s *Server) builtin(line string, privileged bool) (string, bool) {
	a, ok := s.lookupBuiltin(line, privileged)
	if !ok || a.view == nil {
		return a.reply, ok
	}
	snap, ok := s.o.Pool.SnapshotLoad(a.qs...)
	if !ok {
		return "", true
	}
	return string(a.view(nil, &snap)), true
}

// lookupBuiltin is the answer to line if it is one of the commands of
// docs/protocols/mimedefang-multiplexor.md, "Built-in commands" that the
// multiplexor handles itself, looked up in the reference's order.
func (s *Server) lookupBuiltin(line string, privileged bool) (answer, bool) {
	switch line {
	case "help":
		if privileged {
			return fixed(helpPrivileged)
		}
		return fixed(helpRestricted)
	case "free":
		return withSnap(func(sn *pool.Snapshot) string {
			return fmt.Sprintf("%d\n", sn.Count(pool.Idle)+sn.Count(pool.Stopped))
		})
	case "version":
		return fixed(s.o.Version)
	case "tick":
		return fixed(ReplyTick)
	case "status":
		return answer{view: appendStatus}, true
	case "slaves", "workers":
		return withSnap(func(sn *pool.Snapshot) string { return formatWorkers(sn, false) })
	case "busyslaves", "busyworkers":
		return withSnap(func(sn *pool.Snapshot) string { return formatWorkers(sn, true) })
	case "load":
		return withLoad(formatLoad, loadQueries(pool.Scan)...)
	}
	// load1, slaveinfo and workerinfo need something after their space
	// (the reference compares the length first): alone they go to a
	// worker like any unknown command.
	if rest, ok := strings.CutPrefix(line, "load1 "); ok && rest != "" {
		back, ok := scanInt(rest)
		if !ok || back < 10 || back > 600 {
			return fixed(ReplyBadBack)
		}
		return withLoad(func(sn *pool.Snapshot) string { return formatLoad1(sn, back) }, load1Queries(back)...)
	}
	if k, ok := loadCommands[line]; ok {
		return withLoad(formatLoad, loadQueries(k)...)
	}
	if k, ok := hloadCommands[line]; ok {
		return withLoad(formatHLoad, hloadQueries(k)...)
	}
	switch line {
	case "histo":
		return withSnap(formatHisto)
	case "msgs":
		return withSnap(func(sn *pool.Snapshot) string { return fmt.Sprintf("%d\n", sn.Msgs) })
	case "foo_no_such_command":
		return fixed(ReplyUnknown)
	}
	if (strings.HasPrefix(line, "slaveinfo ") && len(line) > 10) || (strings.HasPrefix(line, "workerinfo ") && len(line) > 11) {
		n, ok := scanInt(line[10:])
		if !ok {
			return fixed(ReplyBadWorker)
		}
		return withSnap(func(sn *pool.Snapshot) string {
			if n < 0 || n >= len(sn.Slots) {
				return ReplyWorkerRange
			}
			return formatWorkerInfo(sn, n)
		})
	}
	return answer{}, false
}

// loadCommands and hloadCommands are the load-<cmd> and hload[-<cmd>]
// commands and the kinds they show.
var loadCommands, hloadCommands = func() (load, hload map[string]pool.Kind) {
	load, hload = map[string]pool.Kind{}, map[string]pool.Kind{"hload": pool.Scan}
	for _, k := range []pool.Kind{pool.RelayOK, pool.SenderOK, pool.RecipOK} {
		load["load-"+k.Name()] = k
		hload["hload-"+k.Name()] = k
	}
	return load, hload
}()

// withSnap is an answer made from a pool snapshot by f.
func withSnap(f func(*pool.Snapshot) string) (answer, bool) { return withLoad(f) }

// withLoad is withSnap for the load commands: the windows qs are computed
// by the pool into the snapshot's Loads.
func withLoad(f func(*pool.Snapshot) string, qs ...pool.LoadQuery) (answer, bool) {
	return answer{view: func(b []byte, sn *pool.Snapshot) []byte { return append(b, f(sn)...) }, qs: qs}, true
}

// fixed is a reply that needs nothing of the pool.
func fixed(reply string) (answer, bool) { return answer{reply: reply}, true }
