// Package sockaccess explains, on the client side, why a unix socket
// refused this process: which directory or file stops it, who owns it
// with what mode, and what to change. A bare "connect: permission denied"
// names neither the directory at fault nor the fix.
package sockaccess

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Explain returns err unchanged unless it is a permission error for the
// unix socket at path; then it returns an error that keeps err (errors.Is
// still matches) and says which path component denies this process and
// how to let it in. fix names the configuration that controls the socket,
// e.g. `[throttle.socket] group and mode in sluice.toml`.
func Explain(path string, err error, fix string) error {
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	who := whoAmI()
	abs, aerr := filepath.Abs(path)
	if aerr != nil {
		abs = path
	}
	// The first directory from the root down that this process cannot
	// search is the one at fault; if every one can be searched, it is the
	// socket itself (connect needs write permission on it).
	var dirs []string
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if unix.Access(dirs[i], unix.X_OK) != nil {
			return &Error{Err: err, Msg: fmt.Sprintf("%s cannot pass through the directory %s (%s) to reach the socket %s: keep the socket in a directory every client can search (sluice's runtime_dir, mode 0755) or give this directory search permission for %s", who, dirs[i], describe(dirs[i]), abs, who)}
		}
	}
	return &Error{Err: err, Msg: fmt.Sprintf("%s may not write to the socket %s (%s): set its group to one of this user's groups and its mode to 0660 (%s), or run this client as the socket's owner", who, abs, describe(abs), fix)}
}

// Error is a permission error with its explanation.
type Error struct {
	Err error  // the refusal (a permission error)
	Msg string // which directory or file stops us, and what to change
}

// Error is the refusal followed by its explanation.
func (e *Error) Error() string { return e.Err.Error() + ": " + e.Msg }

// Unwrap returns the original error.
func (e *Error) Unwrap() error { return e.Err }

// whoAmI names this process's user and groups.
func whoAmI() string {
	uid := os.Geteuid()
	name := strconv.Itoa(uid)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	var groups []string
	gids, _ := os.Getgroups()
	gids = append([]int{os.Getegid()}, gids...)
	seen := map[int]bool{}
	for _, g := range gids {
		if seen[g] {
			continue
		}
		seen[g] = true
		groups = append(groups, groupName(g))
	}
	return fmt.Sprintf("user %s (uid %d, groups %v)", name, uid, groups)
}

// describe is a path's owner, group and mode in words.
func describe(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "cannot stat: " + err.Error()
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Sprintf("mode %04o", fi.Mode().Perm())
	}
	owner := strconv.Itoa(int(st.Uid))
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	return fmt.Sprintf("owner %s, group %s, mode %04o", owner, groupName(int(st.Gid)), fi.Mode().Perm())
}

func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
}
