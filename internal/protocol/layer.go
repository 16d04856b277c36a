package protocol

import (
	"strconv"
	"strings"
	"time"
)

// Role is what a round of a semaphore or a read-write lock is to the
// limit layer on the node (layer.lua).
type Role uint8

const (
	// NoLayer is a lock's round: its commands run the kernel scripts alone.
	NoLayer Role = iota
	// Slot is a round of a semaphore's slot.
	Slot
	// Reader is a round of a read-write lock's reader, refused while a
	// writer waits or holds.
	Reader
	// Writer is a round of a read-write lock's writer, on its writer key
	// alone. It is refused while a reader slot is held, and its refusal
	// leaves its intent on the node.
	Writer
)

// Layer is what a round of a semaphore or a read-write lock tells the
// limit layer on the node (layer.lua). The zero Layer is a lock's.
type Layer struct {
	Role Role
	// Keys are the layer's keys as stored: for a Reader the writer key,
	// then for every role the limit record. A Writer's layer makes the
	// names of the reader slots from its lock key's, which must end in
	// "writer", as ":0" to ":63" end the slots'.
	Keys []string
	// Limit is the limit, a decimal string, boxed once: a semaphore's, or
	// a read-write lock's [Readers], which its acquire scripts have fixed
	// in them and its extends send.
	Limit any
	// Intent is, for a Writer, how long its intent lasts on a node that
	// refused it (0: none), in whole ms, boxed once.
	Intent any
}

// Readers is how many readers a read-write lock admits at once: its
// limit, fixed in the reader's and the writer's scripts.
const Readers = 64

// Intent returns d as a Layer's Intent.
func Intent(d time.Duration) any { return d.Milliseconds() }

// layered returns kernel, an acquire or extend script, in the limit
// layer's section name, at its mark "--@kernel".
func layered(kernel, name string) string {
	for _, sec := range strings.Split(layerLua, "\n--@@")[1:] {
		if head, code, _ := strings.Cut(sec, "\n"); head == name {
			code = strings.ReplaceAll(strings.TrimRight(code, "\n"), "@READERS@", strconv.Itoa(Readers))
			return hooks{"kernel": kernel}.fill(code)
		}
	}
	panic("protocol: no section " + name + " in layer.lua")
}

// layerScript returns the acquire script of role r.
func (p *Protocol) layerScript(r Role) script {
	switch r {
	case Reader:
		return p.readAcquire
	case Writer:
		return p.writeAcquire
	}
	return p.slotAcquire
}

// appendLayerArgs appends the layer's arguments of l to cmd, an acquire's
// command with the kernel's arguments.
func appendLayerArgs(cmd Cmd, l Layer) Cmd {
	switch l.Role {
	case Slot:
		return append(cmd, l.Limit)
	case Writer:
		return append(cmd, l.Intent)
	}
	return cmd
}

// layerKeys returns how many of the keys of acq, an acquire's command, are
// its layer's, after the state key: 0 for a lock's.
func (p *Protocol) layerKeys(acq Cmd) int {
	switch acq[1] {
	case p.slotAcquire.sha, p.writeAcquire.sha:
		return 1
	case p.readAcquire.sha:
		return 2
	}
	return 0
}
