// Package rawio reads and writes a connected socket without waking the Go
// runtime's monitor thread. A read or a write through net.Conn is a
// syscall.Syscall, which tells the scheduler a goroutine enters a possibly
// blocking call; when the runtime was idle (every P idle, the monitor
// thread asleep) that wakes the monitor thread, which then polls every
// 20 us until the runtime is idle again. A door between its peer's
// requests is idle, so that happened at every request: on Postfix with a
// class-caps milter, about half of sluice's CPU time per message and most
// of its context switches (docs/milter.md, "Performance"). The sockets are
// non-blocking, so read(2) and write(2) never block and may be issued as
// raw syscalls, which the scheduler does not see; syscall.RawConn's Read
// and Write still wait in the netpoller (with the connection's deadlines)
// when the socket is not ready.
//
// Not under the race detector: it learns of the ordering a socket gives
// between two goroutines of one process (a test writing a request, the
// server reading it) from annotations inside net.Conn's Read and Write,
// which raw syscalls bypass; Supported is false in a -race build, whose
// callers use net.Conn.
//
// It also holds the raw calls on bare non-blocking descriptors (ReadFD,
// WriteFD, CloseFD, Accept4; Linux, -race included) that the mux's front
// and the pool's worker pipes use on the pool's owner.
package rawio
