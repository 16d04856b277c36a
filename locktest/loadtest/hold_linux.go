package loadtest

import (
	"syscall"
	"time"
)

// holdFor keeps a lock for sc.Hold. With sc.HoldBlocking the thread blocks
// in nanosleep, which ends on time whatever the process reads. Otherwise it
// sleeps on a Go timer (time.Sleep). That timer waits in whole milliseconds
// once something else wakes the process during the sleep:
// runtime/netpoll_epoll.go rounds a wait under 1 ms up to 1 ms. So a 1 ms
// sleep lasts up to 2 ms in a process that reads a message meanwhile.
func holdFor(sc Scenario) {
	if !sc.HoldBlocking {
		time.Sleep(sc.Hold)
		return
	}
	ts := syscall.NsecToTimespec(sc.Hold.Nanoseconds())
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); err != syscall.EINTR {
			return
		}
		ts = left // interrupted by a signal (the Go runtime's preemption): the rest
	}
}
