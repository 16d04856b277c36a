// Package hashslot computes Redis Cluster hash slots. The lock client uses it
// to keep every key that one script touches in one slot.
package hashslot

import (
	"strconv"
	"strings"
	"sync"
)

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// Slot returns the hash slot of key as Redis Cluster computes it. That is
// the CRC16 (XMODEM) of [Hashed](key), modulo [Count].
func Slot(key string) int { return int(crc16(Hashed(key)) % Count) }

// Hashed returns the part of key that Redis Cluster and go-redis's Ring hash.
// That is the hash tag, the part between the first '{' and the next '}', when
// it is not empty. Otherwise it is the whole key.
func Hashed(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Tags finds, for each slot, a short string whose own slot it is. Its zero
// value is ready to use, and it is safe for concurrent use. The first call
// of [Tags.Tag] builds a table of 16384 strings, so keep one Tags for every
// use.
type Tags struct {
	once sync.Once
	tags []string
}

// Tag returns a short string whose own slot is slot, the same at every call.
// A key that contains "{" + t.Tag(Slot(k)) + "}" lives in the slot of k. Tag
// panics unless 0 <= slot < [Count].
func (t *Tags) Tag(slot int) string {
	t.once.Do(func() {
		t.tags = make([]string, Count)
		left := Count
		for i := 0; left > 0; i++ {
			s := strconv.Itoa(i)
			if sl := Slot(s); t.tags[sl] == "" {
				t.tags[sl] = s
				left--
			}
		}
	})
	return t.tags[slot]
}
