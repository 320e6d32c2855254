// Package privdrop gives up root: it looks up the unprivileged account a
// daemon should run as and switches the whole process to it (supplementary
// groups, group, user), after the daemon has bound what only root may bind.
//
// Go applies setuid and setgid to every thread of the process (since Go
// 1.16), so no goroutine keeps root's identity after Drop.
package privdrop

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// Account is a user to run as, with its primary and supplementary groups.
type Account struct {
	Name   string // the user's name
	Group  string // the primary group's name
	UID    int    // the user's id
	GID    int    // the primary group's id
	Groups []int  // supplementary groups, the primary one first
}

// ErrUnknownUser is returned by Lookup for a name the system does not know.
var ErrUnknownUser = errors.New("unknown user")

// Lookup finds name in the system's user database.
func Lookup(name string) (Account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return Account{}, fmt.Errorf("%w %q: %v", ErrUnknownUser, name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return Account{}, fmt.Errorf("%w %q: non-numeric uid %q or gid %q", ErrUnknownUser, name, u.Uid, u.Gid)
	}
	a := Account{Name: name, Group: u.Gid, UID: uid, GID: gid, Groups: []int{gid}}
	if g, err := user.LookupGroupId(u.Gid); err == nil {
		a.Group = g.Name
	}
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.Atoi(s); err == nil && g != gid {
				a.Groups = append(a.Groups, g)
			}
		}
	}
	return a, nil
}

// Current reports whether the process already runs as a (real and
// effective user and group).
func (a Account) Current() bool {
	return os.Getuid() == a.UID && os.Geteuid() == a.UID && os.Getgid() == a.GID && os.Getegid() == a.GID
}

// StepError is a failed step of Drop: Step is the call in C's words
// ("initgroups(sluice)", "setgid(110)", "setuid(110)").
type StepError struct {
	Step string
	Err  error
}

// Error names the step that failed and why.
func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }

// Unwrap returns the system call's error.
func (e *StepError) Unwrap() error { return e.Err }

// Drop switches the process to a: supplementary groups, then group, then
// user, so that nothing is left to switch back with. It does nothing when
// the process already runs as a. After it, the process cannot regain root.
func (a Account) Drop() error {
	if a.Current() {
		return nil
	}
	if err := syscall.Setgroups(a.Groups); err != nil {
		return &StepError{Step: "initgroups(" + a.Name + ")", Err: err}
	}
	if err := syscall.Setgid(a.GID); err != nil {
		return &StepError{Step: "setgid(" + strconv.Itoa(a.GID) + ")", Err: err}
	}
	if err := syscall.Setuid(a.UID); err != nil {
		return &StepError{Step: "setuid(" + strconv.Itoa(a.UID) + ")", Err: err}
	}
	// setuid from root to a non-root user clears every capability; make
	// sure root cannot be had back.
	if a.UID != 0 && syscall.Setuid(0) == nil {
		return &StepError{Step: "setuid(0) after the drop", Err: errors.New("still succeeds: the drop did not take")}
	}
	return nil
}
