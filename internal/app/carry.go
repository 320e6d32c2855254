package app

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sluice/internal/governor"
	"sluice/internal/safefs"
)

// carryFile is where a stopping daemon leaves the SMTP sessions its
// anvil door still counted (in the state directory), for the next one.
const carryFile = "anvil.sessions"

// carryMagic is the first line of the carry file.
const carryMagic = "sluice anvil sessions 1"

// maxCarryFile caps the carry file: an ident per smtpd process that was
// in a session, far below this.
const maxCarryFile = 1 << 20

// encodeCarry is the carry file's text: the magic line, when it was
// written (Unix ns), then one quoted ident per session.
func encodeCarry(written time.Time, idents []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n%d\n", carryMagic, written.UnixNano())
	for _, id := range idents {
		b.WriteString(strconv.Quote(id))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// parseCarry reads a carry file's text. Anything but the format
// encodeCarry writes is an error naming the line.
func parseCarry(b []byte) (written time.Time, idents []string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 256), 4096)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		switch n {
		case 1:
			if line != carryMagic {
				return time.Time{}, nil, fmt.Errorf("line 1: not a sluice anvil sessions file")
			}
		case 2:
			ns, err := strconv.ParseInt(line, 10, 64)
			if err != nil || ns <= 0 {
				return time.Time{}, nil, fmt.Errorf("line 2: %q is not a time", line)
			}
			written = time.Unix(0, ns)
		default:
			id, err := strconv.Unquote(line)
			if err != nil || !strings.HasPrefix(line, `"`) || id == "" {
				return time.Time{}, nil, fmt.Errorf("line %d: %q is not a quoted ident", n, line)
			}
			idents = append(idents, id)
		}
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	if n < 2 {
		return time.Time{}, nil, fmt.Errorf("truncated after %d lines", n)
	}
	return written, idents, nil
}

// writeCarry leaves the sessions for the next daemon (write to a
// temporary file in the state directory, then rename: a crash leaves the
// old file or the new, never half of one). No session: no file.
func (d *Daemon) writeCarry(now time.Time, idents []string) {
	if len(idents) == 0 {
		return
	}
	path := d.cfg.Load().StatePath(carryFile)
	f, err := os.CreateTemp(filepath.Dir(path), "."+carryFile+".tmp-*")
	if err == nil {
		_, err = f.Write(encodeCarry(now, idents))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), path)
		}
		if err != nil {
			os.Remove(f.Name())
		}
	}
	if err != nil {
		d.log.Error("anvil: cannot hand the open SMTP sessions to the next start; it will not count them", "file", path, "sessions", len(idents), "err", err)
		return
	}
	d.log.Info("anvil: open SMTP sessions handed to the next start", "file", path, "sessions", len(idents))
}

// takeCarry counts the sessions the previous daemon handed over, and
// removes the file: it is read once. A file older than
// governor.CarriedTTL is stale (those sessions have ended) and ignored.
func (d *Daemon) takeCarry(ctx context.Context, now time.Time) {
	path := d.cfg.Load().StatePath(carryFile)
	b, err := safefs.ReadFile(path, maxCarryFile)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	defer os.Remove(path)
	if err != nil {
		d.log.Error("anvil: the sessions the last stop handed over cannot be read; they are not counted", "file", path, "err", err)
		return
	}
	written, idents, err := parseCarry(b)
	if err != nil {
		d.log.Error("anvil: the sessions the last stop handed over cannot be read; they are not counted", "file", path, "err", err)
		return
	}
	if age := now.Sub(written); age > governor.CarriedTTL || age < -time.Minute {
		d.log.Warn("anvil: the sessions the last stop handed over are stale; not counted", "file", path, "written", written.Format(time.RFC3339))
		return
	}
	gov := d.gov.Load()
	for _, id := range idents {
		if err := gov.AnvilCarry(ctx, id); err != nil {
			d.log.Error("anvil: a session the last stop handed over cannot be counted", "ident", id, "err", err)
		}
	}
	d.log.Info("anvil: open SMTP sessions of the last start counted until smtpd ends them", "sessions", len(idents))
}
