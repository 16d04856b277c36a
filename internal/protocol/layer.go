package protocol

import (
	"strconv"
	"strings"
	"time"
)

// Layer is what a round of a semaphore or a read-write lock tells the
// limit layer on the node (layer.lua). The zero Layer is a plain lock's:
// its commands run the kernel scripts alone.
type Layer struct {
	// Keys are the layer's keys as stored (see layer.lua): the limit
	// record; for a writer, then the writer's intent; for a reader, the
	// intent and the writer key. nil for no layer.
	Keys []string
	// Limit is the semaphore's limit, boxed once: a decimal string.
	Limit any
	// Role is "" for a semaphore's slot, [ReaderRole] for a reader, or
	// what [WriterRole] returns for a writer.
	Role any
}

// ReaderRole is the role of a read-write lock's reader: refused while a
// writer's intent is on the node.
const ReaderRole = "r"

// WriterRole returns the role of a read-write lock's writer id: its
// refused acquires leave an intent of id on the node that lasts for
// intent and refuses readers; none when intent is 0 (a writer that does
// not wait).
func WriterRole(intent time.Duration, id string) string {
	return "w" + strconv.FormatInt(intent.Milliseconds(), 10) + ":" + id
}

// layered returns kernel, an acquire or extend script, inside the limit
// layer's section name: the layer's head, then kernel as the function
// kernel(KEYS, ARGV), then the section.
func layered(kernel, name string) string {
	parts := strings.Split(layerLua, "\n--@@")
	section := ""
	for _, sec := range parts[1:] {
		if head, code, _ := strings.Cut(sec, "\n"); head == name {
			section = code
		}
	}
	return parts[0] + "\nlocal function kernel(KEYS, ARGV)\n" + kernel + "\nend\n" + section
}

// appendKeys appends the script keys of a command with layer l to cmd:
// keys but the last (the lock keys), l's keys, then the last of keys (the
// node's state).
func appendKeys(cmd Cmd, keys []string, l Layer) Cmd {
	for _, k := range keys[:len(keys)-1] {
		cmd = append(cmd, k)
	}
	for _, k := range l.Keys {
		cmd = append(cmd, k)
	}
	return append(cmd, keys[len(keys)-1])
}

// layerKeys returns how many of the keys of acq, an acquire's command, are
// its layer's, after the lock keys and before the state key: 0 for a
// plain lock's.
func (p *Protocol) layerKeys(acq Cmd) int {
	if acq[1] != p.limitAcquire.sha {
		return 0
	}
	switch role := acq[3+acq[2].(int)+1]; role {
	case "":
		return 1
	case ReaderRole:
		return 3
	}
	return 2
}
