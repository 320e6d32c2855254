package mux

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"sluice/internal/pool"
)

// The help texts, as the reference sends them on each socket.
const helpPrivileged = "" +
	"help             -- List available multiplexor commands\n" +
	"status           -- Display worker status\n" +
	"rawstatus        -- Display worker status in computer-readable format\n" +
	"barstatus        -- Display worker status as bar graph\n" +
	"free             -- Display number of free workers\n" +
	"load             -- Display worker load (scans)\n" +
	"rawload          -- Display worker load in computer-readable format\n" +
	"load1 secs       -- Display worker load in alternate format\n" +
	"rawload1 secs    -- Display worker load in alternate format\n" +
	"load-relayok     -- Display load (relayok requests)\n" +
	"rawload-relayok  -- Computer-readable load (relayok requests)\n" +
	"load-senderok    -- Display load (senderok requests)\n" +
	"rawload-senderok -- Computer-readable load (senderok requests)\n" +
	"load-recipok     -- Display load (recipok requests)\n" +
	"rawload-recipok  -- Computer-readable load (recipok requests)\n" +
	"histo            -- Display histogram of busy workers\n" +
	"msgs             -- Display number of messages processed since startup\n" +
	"reread           -- Force a re-read of filter rules\n" +
	"workers           -- Display workers with process-IDs\n" +
	"busyworkers       -- Display busy workers with process-IDs\n" +
	"workerinfo n      -- Display information about a particular worker\n" +
	"scan /path       -- Run a scan (do not invoke using md-mx-ctrl)\n" +
	"(Analogous hload commands provide hourly information)\n"

const helpRestricted = "" +
	"help             -- List available multiplexor commands\n" +
	"free             -- Display number of free workers\n" +
	"load             -- Display worker load (scans)\n" +
	"rawload          -- Display worker load in computer-readable format\n" +
	"load1 secs       -- Display worker load in alternate format\n" +
	"rawload1 secs    -- Display worker load in computer-readable alternate format\n" +
	"load-relayok     -- Display load (relayok requests)\n" +
	"rawload-relayok  -- Computer-readable load (relayok requests)\n" +
	"load-senderok    -- Display load (senderok requests)\n" +
	"rawload-senderok -- Computer-readable load (senderok requests)\n" +
	"load-recipok     -- Display load (recipok requests)\n" +
	"rawload-recipok  -- Computer-readable load (recipok requests)\n" +
	"status           -- Display worker status\n" +
	"histo            -- Display histogram of busy workers\n" +
	"msgs             -- Display number of messages processed since startup\n" +
	"workers           -- Display workers with process-IDs\n" +
	"busyworkers       -- Display busy workers with process-IDs\n" +
	"workerinfo n      -- Display information about a particular worker\n" +
	"(Analogous hload commands provide hourly information)\n"

// appendStatus appends the status reply:
// `<letters> <msgs> <activations> <queueSize> <queued> <uptime>`.
// Append-style, so that the owner answers status into a buffer of its
// own without an allocation (monitoring polls it without end).
func appendStatus(b []byte, sn *pool.Snapshot) []byte {
	for _, s := range sn.Slots {
		b = append(b, s.State.Letter())
	}
	for _, n := range [...]int64{int64(sn.Msgs), int64(sn.Activations), int64(sn.QueueSize), int64(sn.Queued), int64(sn.Uptime())} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, n, 10)
	}
	return append(b, '\n')
}

// formatWorkers: one line per slot (busy ones only with busyOnly);
// `<slot> <S|I|B|K>[ <pid>][ <busycmd>][ last=<lastcmd>] ago=<secs>[ (<tag>)]`.
func formatWorkers(sn *pool.Snapshot, busyOnly bool) string {
	var b strings.Builder
	for i, s := range sn.Slots {
		if busyOnly && s.State != pool.Busy {
			continue
		}
		fmt.Fprintf(&b, "%d %c", i, s.State.Letter())
		if s.State != pool.Stopped {
			fmt.Fprintf(&b, " %d", s.PID)
		}
		if s.State == pool.Busy && s.Current != pool.Other {
			fmt.Fprintf(&b, " %s", s.Current.Name())
		}
		if s.Last != pool.Other {
			fmt.Fprintf(&b, " last=%s", s.Last.Name())
		}
		fmt.Fprintf(&b, " ago=%d", secs(sn, s.LastChange))
		if s.Tag != "" {
			fmt.Fprintf(&b, " (%s)", s.Tag)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func secs(sn *pool.Snapshot, t interface{ Unix() int64 }) int64 {
	return sn.Now.Unix() - t.Unix()
}

var loadWindows = [4]int{10, 60, 300, 600}

// loadQueries are the windows formatLoad shows for kind k.
func loadQueries(k pool.Kind) []pool.LoadQuery {
	qs := make([]pool.LoadQuery, len(loadWindows))
	for i, back := range loadWindows {
		qs[i] = pool.LoadQuery{Kind: k, Back: back}
	}
	return qs
}

// load1Kinds are the kinds formatLoad1 shows, in its order.
var load1Kinds = []pool.Kind{pool.Scan, pool.RelayOK, pool.SenderOK, pool.RecipOK}

// load1Queries are the windows formatLoad1 shows.
func load1Queries(back int) []pool.LoadQuery {
	qs := make([]pool.LoadQuery, len(load1Kinds))
	for i, k := range load1Kinds {
		qs[i] = pool.LoadQuery{Kind: k, Back: back}
	}
	return qs
}

var hloadWindows = [4]int{1, 4, 12, 24}

// hloadQueries are the windows formatHLoad shows for kind k.
func hloadQueries(k pool.Kind) []pool.LoadQuery {
	qs := make([]pool.LoadQuery, len(hloadWindows))
	for i, h := range hloadWindows {
		qs[i] = pool.LoadQuery{Kind: k, Back: h, Hours: true}
	}
	return qs
}

// formatLoad: the 29 fields of `load` and `load-<cmd>`; sn.Loads holds
// loadQueries(k).
func formatLoad(sn *pool.Snapshot) string {
	f := columns(sn.Loads, colCount, colAvgBusy(1), colAvgMs, colActivated, colReaped)
	f = append(f, counts(sn)...)
	return strings.Join(f, " ") + "\n"
}

// columns is the fields of windows w column by column: each column's
// field for every window, then the next column.
func columns(w []pool.Window, cols ...func(pool.Window) string) []string {
	f := make([]string, 0, len(cols)*len(w))
	for _, col := range cols {
		for i := range w {
			f = append(f, col(w[i]))
		}
	}
	return f
}

// The columns of the load replies.
func colCount(w pool.Window) string     { return fmt.Sprint(w.Count) }
func colAvgMs(w pool.Window) string     { return fmt.Sprintf("%f", w.AvgMs()) }
func colActivated(w pool.Window) string { return fmt.Sprint(w.Activated) }
func colReaped(w pool.Window) string    { return fmt.Sprint(w.Reaped) }
func colSpan(w pool.Window) string      { return fmt.Sprint(w.Span) }

// colAvgBusy is the average busy workers column, ifNone for a window
// without a command.
func colAvgBusy(ifNone float64) func(pool.Window) string {
	return func(w pool.Window) string { return fmt.Sprintf("%f", w.AvgBusy(ifNone)) }
}

// counts: busy idle stopped killed msgs activations queueSize queued uptime.
func counts(sn *pool.Snapshot) []string {
	return []string{
		fmt.Sprint(sn.Count(pool.Busy)), fmt.Sprint(sn.Count(pool.Idle)),
		fmt.Sprint(sn.Count(pool.Stopped)), fmt.Sprint(sn.Count(pool.Killed)),
		fmt.Sprint(sn.Msgs), fmt.Sprint(sn.Activations), fmt.Sprint(sn.QueueSize),
		fmt.Sprint(sn.Queued), fmt.Sprint(sn.Uptime()),
	}
}

// formatLoad1: the 26 fields of `load1 N`; sn.Loads holds
// load1Queries(back).
func formatLoad1(sn *pool.Snapshot, back int) string {
	var f []string
	for _, w := range sn.Loads {
		f = append(f, colCount(w), colAvgBusy(0)(w), colAvgMs(w))
	}
	f = append(f, counts(sn)...)
	f = append(f, fmt.Sprint(back))
	for _, k := range load1Kinds {
		f = append(f, fmt.Sprint(sn.BusyWith(k)))
	}
	return strings.Join(f, " ") + "\n"
}

// formatHLoad: the 16 fields of `hload` and `hload-<cmd>`; sn.Loads
// holds hloadQueries(k).
func formatHLoad(sn *pool.Snapshot) string {
	return strings.Join(columns(sn.Loads, colCount, colAvgBusy(0), colAvgMs, colSpan), " ") + "\n"
}

// formatHisto: `%4d %u` per slot.
func formatHisto(sn *pool.Snapshot) string {
	var b strings.Builder
	for i, n := range sn.Histo {
		fmt.Fprintf(&b, "%4d %d\n", i+1, n)
	}
	return b.String()
}

// formatWorkerInfo: the nine lines of `workerinfo N`.
func formatWorkerInfo(sn *pool.Snapshot, n int) string {
	s := sn.Slots[n]
	pid := -1
	if s.State != pool.Stopped {
		pid = s.PID
	}
	age, first := int64(-1), int64(-1)
	if !s.Activated.IsZero() {
		age = secs(sn, s.Activated)
	}
	if !s.FirstReq.IsZero() {
		first = secs(sn, s.FirstReq)
	}
	return fmt.Sprintf("Worker %d\nState %s\nPID %d\nNumRequests %d\nNumScans %d\nAge %d\nFirstReqAge %d\nLastStateChangeAge %d\nStatusTag %s\n",
		n, s.State, pid, s.NumRequests, s.NumScans, age, first, secs(sn, s.LastChange), s.Tag)
}

// formatAutoscale: 3.7.1's `autoscale` reply, with or without -k
// (docs/protocols/mimedefang-multiplexor.md, "Built-in commands").
func formatAutoscale(sn *pool.Snapshot) string {
	enabled := 0
	if sn.Autoscale {
		enabled = 1
	}
	return fmt.Sprintf("enabled=%d interval=%d ema_busy=%.4f scale_out=%.2f scale_in=%.2f out_cool=%d in_cool=%d ema_alpha=%.4f\n",
		enabled, int(pool.AutoscaleInterval/time.Second), sn.EMABusy, pool.AutoscaleOut, pool.AutoscaleIn,
		int(pool.AutoscaleOutCool/time.Second), int(pool.AutoscaleInCool/time.Second), pool.AutoscaleAlpha)
}
