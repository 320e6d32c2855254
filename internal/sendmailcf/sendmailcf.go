// Package sendmailcf reads what sluice needs of Sendmail's configuration
// file, sendmail.cf: MaxDaemonChildren, the SMTP sessions the daemon
// serves at once, which is the MTA's capacity the classes' reservations
// divide (docs/flood.md).
//
// A sendmail.cf is long (about 2,000 lines, most of them rules); only its
// option lines matter here. An option is set on a line "O Name=value":
// the long form every sendmail.cf that m4 builds uses, "O" and one space,
// spaces allowed around "=", the name matched without regard to case, as
// Sendmail's readcf.c reads it; a later line overrides an earlier one; a
// line starting with "#" is a comment, and so is what follows a "#" after
// a space in the value. The one-letter form of old configurations has no
// letter for MaxDaemonChildren. Not read: a per-daemon "children=" in
// DaemonPortOptions, and abbreviated option names.
package sendmailcf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"sluice/internal/safefs"
)

// MaxFile bounds the sendmail.cf read: a larger file is refused, never
// read cut short. (Debian's is about 60 KiB.)
const MaxFile = 4 << 20

// maxLine bounds one line of the file.
const maxLine = 64 << 10

// ErrNoLimit is returned when the file sets no MaxDaemonChildren, or sets
// it to 0: Sendmail then forks a child for every connection, and there is
// no capacity to divide.
var ErrNoLimit = errors.New("sendmail.cf sets no MaxDaemonChildren (Sendmail's default, 0, is no limit): there is no capacity to divide; set [mta] sessions")

// MaxDaemonChildren reads the sendmail.cf at path as root may read a file
// another user cannot replace (safefs.ReadFile: a regular file of at most
// MaxFile bytes, no link another user could plant) and returns its
// MaxDaemonChildren.
func MaxDaemonChildren(path string) (int64, error) {
	b, err := safefs.ReadFile(path, MaxFile)
	if err != nil {
		return 0, fmt.Errorf("sendmail.cf: %w", err)
	}
	n, err := Parse(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// Parse returns the MaxDaemonChildren that the sendmail.cf text b sets:
// the last "O MaxDaemonChildren=N" line's N. A malformed value is an error
// naming its line; none, or 0, is ErrNoLimit.
func Parse(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var n int64
	line := 0
	for sc.Scan() {
		line++
		v, ok := option(sc.Text(), "MaxDaemonChildren")
		if !ok {
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil || x < 0 {
			return 0, fmt.Errorf("line %d: MaxDaemonChildren=%q is not a number of children", line, clip(v))
		}
		n = x
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("line %d: %w", line+1, err)
	}
	if n == 0 {
		return 0, ErrNoLimit
	}
	return n, nil
}

// option returns the value a line "O name=value" sets for name (spaces
// around "=" allowed, the name without regard to case, a " #" comment
// after the value dropped).
func option(l, name string) (string, bool) {
	rest, ok := strings.CutPrefix(l, "O ")
	if !ok {
		return "", false
	}
	k, v, ok := strings.Cut(strings.TrimLeft(rest, " "), "=")
	if !ok || !strings.EqualFold(strings.TrimRight(k, " "), name) {
		return "", false
	}
	if i := strings.Index(v, " #"); i >= 0 {
		v = v[:i]
	}
	return strings.Trim(v, " \r"), true
}

// clip shortens a value for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
