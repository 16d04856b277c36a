// Package protocol is everything a lock client and a Redis node say to each
// other. It holds the names of the keys and channels the scripts use, and the
// Lua scripts themselves. It gives their arguments as typed commands, and
// their replies as typed values. Nothing else in the module spells a script
// argument, a reply code or a reserved name.
//
// Every script is atomic on its node and guarded by the lock's token: none
// of them touches a key that holds another owner's token. Each .lua file's
// header specifies its KEYS, ARGV and every reply.
package protocol

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redquorum/redquorum/internal/hashslot"
)

// The reserved names, each after the client's key prefix.
const (
	// StateKey is each node's state, a hash without expiry. It holds the
	// restart guard ("g"), the id of the round that created it ("id"), the
	// fence counter ("f") and the shortcut's mark ("v"). It also holds the
	// run_id and replication ID of the server process that last checked it
	// ("p" and "r", see check.lua). On a Redis Cluster node there is one per
	// hash slot (see [SlotStateKey]). Lock keys must not start with it.
	StateKey = "redquorum:node"
	// CheckMark is the mark ("v" in the state) of a guard that the
	// connection check started (check.lua). The server kept its data, so no
	// new-deployment shortcut ends that guard; a shortcut's marks are 32 hex
	// digits.
	CheckMark = "x"
	// TombstonePrefix, followed by a token, is the tombstone a release
	// leaves on a key that does not hold the token. The token's late SET is
	// then refused. A key keeps its tombstones after its holder's token,
	// each after a '\n' (see tombstone.lua). A key with no holder begins
	// with the first of them, and counts as free.
	TombstonePrefix = "redquorum:gone:"
	// ReleasedChannel, followed by a key as stored, is the channel on which
	// an unlock announces the key's release. The message names the first
	// waiter of the key's line, or is empty.
	ReleasedChannel = "redquorum:released:"
	// LinePrefix, after the client's key prefix and followed by a key
	// without it, is the key's line. The line is a sorted set that orders
	// the waiters of separate clients: a hint for whom a release wakes
	// first (see inline.lua). Lock keys must not start with it. Its value
	// says "queue", and must not change: clients of the previous release
	// use the same lines during a rolling deploy.
	LinePrefix = "redquorum:queue:"
	// LeaderPrefix, after the client's key prefix and followed by an
	// election's name without it, is the election's record. The record is
	// its leader's term, value and token. The leader writes it only while
	// it holds the election's lock (see elect.lua). Lock keys must not
	// start with it.
	LeaderPrefix = "redquorum:leader:"
	// SemaphorePrefix names a semaphore's slot keys and its limit record
	// (see layer.lua). It comes after the client's key prefix, and before
	// the semaphore's name, ":" and a slot number or "limit". Lock keys
	// must not start with it.
	SemaphorePrefix = "redquorum:sem:"
	// RWMutexPrefix is [SemaphorePrefix] for read-write locks, whose keys
	// also include the writer's intent, ":writer". Lock keys must not start
	// with it.
	RWMutexPrefix = "redquorum:rw:"
)

// The waiting strategies (see announce.lua) use three more names, none a key.
const (
	// HandPrefix, followed by the token of a waiter's round, is the hand
	// value. A release sets a key to it when it hands the lock off to that
	// waiter. No token starts with it (tokens are base64url, without ':').
	HandPrefix = "h:"
	// HandChannel, followed by a client's id, is the client's hand
	// channel. Each client that waits for handoffs subscribes to its own on
	// every node, for as long as it is connected. A release hands a key off
	// only to a waiter whose client is still subscribed, so never to one
	// whose process is gone. Its value is shared with the previous
	// release's clients too.
	HandChannel = "redquorum:waiting:"
	// WaitedPrefix, before a key's value, is the mark of a key that a
	// waiter found held. An acquire that the key refused sets it, keeping
	// the value and its TTL, and a handoff sets it on the key it hands off.
	// Only the release of a marked key looks at the key's line and
	// announces itself; an uncontended unlock just deletes the key. Every
	// script compares tokens without it. No token or hand value starts with
	// it.
	WaitedPrefix = "w:"
)

// MaxTombstones is the most tombstones a key keeps (see
// [TombstonePrefix]); beyond it, a release drops the one that expires
// first.
const MaxTombstones = 8

// Holding returns the token or hand value held in value, read from a lock
// key, and whether the mark of [WaitedPrefix] was there. The token comes
// without the mark and without the tombstones that follow it. For a key
// that holds only tombstones, it returns the first of them
// ([TombstonePrefix]), which is free.
func Holding(value string) (token string, waited bool) {
	token, waited = strings.CutPrefix(value, WaitedPrefix)
	token, _, _ = strings.Cut(token, "\n")
	return token, waited
}

// Reserved reports whether key, without the client's prefix, is one of
// the library's own keys rather than a lock key. Those are a node state, a
// line, an election's record, and a semaphore's or a read-write lock's key.
// Lock keys must not start with any of these names.
func Reserved(key string) bool {
	for _, p := range [...]string{StateKey, LinePrefix, LeaderPrefix, SemaphorePrefix, RWMutexPrefix} {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// LineKey returns the line of key (as given, without prefix) for a client
// whose key prefix is prefix: the name inline.lua makes of it.
func LineKey(prefix, key string) string { return prefix + LinePrefix + key }

// HandEntry returns the entry in a key's line of a waiter's round that
// joined for a handoff (handoff.lua): the waiter's place, the round's
// token, the lock's TTL in ms and the client's hand channel.
func HandEntry(place, token string, ttl time.Duration, channel string) string {
	return place + "|" + token + "|" + strconv.FormatInt(ttl.Milliseconds(), 10) + "|" + channel
}

// SlotStateKey returns the state key, after prefix, that lives in the hash
// slot of key on a Redis Cluster node. There a script may only touch keys
// of one slot.
func SlotStateKey(prefix, key string, tags *hashslot.Tags) string {
	return prefix + StateKey + ":{" + tags.Tag(hashslot.Slot(key)) + "}"
}

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed release.lua
	releaseLua string
	//go:embed extend.lua
	extendLua string
	//go:embed fence.lua
	fenceLua string
	//go:embed check.lua
	checkLua string
	//go:embed newstate.lua
	newStateLua string
	//go:embed guard.lua
	guardLua string
	//go:embed value.lua
	valueLua string
	//go:embed tombstone.lua
	tombstoneLua string
	//go:embed announce.lua
	announceLua string
	//go:embed inline.lua
	inLineLua string
	//go:embed handoff.lua
	handoffLua string
	//go:embed elect.lua
	electLua string
	//go:embed layer.lua
	layerLua string
)

// script is one Lua script with its reserved names filled in.
type script struct {
	src string
	sha any // the SHA1 of src in hex, boxed once for the commands
}

// names fills in the reserved names of the scripts.
func names() *strings.Replacer {
	return strings.NewReplacer("@MAXGONE@", strconv.Itoa(MaxTombstones), "@GONE@", TombstonePrefix, "@RELEASED@", ReleasedChannel, "@LINE@", LinePrefix, "@HAND@", HandPrefix, "@WAITED@", WaitedPrefix, "@STATE@", StateKey, "@LEADER@", LeaderPrefix)
}

// newScript returns the script made of parts, in order.
func newScript(parts ...string) script {
	included := strings.NewReplacer("@VALUE@", valueLua+"\n"+tombstoneLua, "@NEWSTATE@", newStateLua, "@GUARD@", guardLua)
	src := names().Replace(included.Replace(strings.Join(parts, "\n")))
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Protocol builds one client's commands. It holds the scripts. It boxes once
// the arguments that are the same for every lock of the client, since an
// interface holding a string or a large integer costs an allocation per
// command. It is safe for concurrent use.
type Protocol struct {
	acquire, release, extend, fence, check, elect script
	// slotAcquire, readAcquire, writeAcquire and limitExtend are acquire
	// and extend in the limit layer of semaphores and read-write locks
	// (layer.lua).
	slotAcquire, readAcquire, writeAcquire, limitExtend script

	strategy    Strategy
	argc        int // the strategy's acquire arguments (see acquire.lua)
	guard       any // the restart guard in ms; 0: off
	fencing     bool
	pipes       sync.Pool // of *PipelinedAcquire
	joins       sync.Pool // of *JoinCmds
	none        any       // "": an optional argument not sent
	state       any       // the plain state key, for an announced release
	handChannel any       // the client's hand channel (see HandChannel); nil: no handoffs
	lastTTL     atomic.Pointer[boxedTTL]
	// lastTicket is the last ticket sent, boxed (an int64): the waiters
	// whose tickets are equal share it.
	lastTicket atomic.Value
}

// New returns the protocol of a client. Its nodes keep a restart guard of
// guard (0: off), and its locks carry fences when fencing is set. The
// client waits with strategy s, and stores its keys after prefix.
func New(guard time.Duration, fencing bool, s Strategy, prefix string) *Protocol {
	fenced := strings.NewReplacer("@FENCED@", strconv.FormatBool(fencing))
	hooks := strategyHooks(s)
	acquire, extend := hooks.fill(fenced.Replace(acquireLua)), valueLua+"\n"+newStateLua+"\n"+extendLua
	p := &Protocol{
		acquire:      newScript(acquire),
		slotAcquire:  newScript(layered(acquire, "semaphore")),
		readAcquire:  newScript(layered(acquire, "reader")),
		writeAcquire: newScript(layered(acquire, "writer")),
		release:      newScript(hooks.fill(releaseLua)),
		extend:       newScript(extend),
		limitExtend:  newScript(layered(extend, "extend")),
		fence:        newScript(valueLua, fenceLua),
		check:        newScript(checkLua),
		elect:        newScript(valueLua, electLua),
		strategy:     s, argc: []int{0, 0, 3, 5}[s],
		guard: guard.Milliseconds(), fencing: fencing, none: "", state: prefix + StateKey,
	}
	return p
}

// WithHandChannel makes p's waiters join for handoffs on the node, on
// behalf of a client whose hand channel is ch (see [HandChannel]). It
// returns p; call it before p is used, and only with the Handoff strategy.
func (p *Protocol) WithHandChannel(ch string) *Protocol {
	p.handChannel = ch
	return p
}

// boxedTTL is a ttl in ms boxed as a script argument.
type boxedTTL struct {
	ms  int64
	arg any
}

// ttlArg returns ttl in whole ms as a script argument. When the ttl is the
// last command's, it returns the same box: boxing an int64 above 255 costs
// an allocation.
func (p *Protocol) ttlArg(ttl time.Duration) any {
	ms := ttl.Milliseconds()
	if b := p.lastTTL.Load(); b != nil && b.ms == ms {
		return b.arg
	}
	b := &boxedTTL{ms, ms}
	p.lastTTL.Store(b)
	return b.arg
}

// ticketArg returns a line ticket as a script argument, the same box as
// the last command's when the ticket is the same.
func (p *Protocol) ticketArg(ticket int64) any {
	b := p.lastTicket.Load()
	if t, ok := b.(int64); ok && t == ticket {
		return b
	}
	b = ticket
	p.lastTicket.Store(b)
	return b
}

// scriptOf returns the script whose SHA is sha.
func (p *Protocol) scriptOf(sha any) (script, bool) {
	for _, s := range []script{p.acquire, p.release, p.extend, p.fence, p.check, p.elect, p.slotAcquire, p.readAcquire, p.writeAcquire, p.limitExtend} {
		if s.sha == sha {
			return s, true
		}
	}
	return script{}, false
}

// Sources returns the scripts' Lua sources as sent, for tests that run a
// script with arguments of their own.
func (p *Protocol) Sources() (acquire, release, extend, fence, check string) {
	return p.acquire.src, p.release.src, p.extend.src, p.fence.src, p.check.src
}
