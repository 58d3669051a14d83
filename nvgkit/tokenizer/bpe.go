package tokenizer

import (
	"container/heap"
	"sync"
)

// mergeTable maps an adjacent pair of token ids (left<<32 | right) to the merge's rank
// (its index in the merges list; lower merges first) and the merged token's id, packed as
// rank<<32 | id.
type mergeTable map[uint64]uint64

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// smallWord is the longest word (in initial symbols) merged with the quadratic scan; longer
// words use the heap, whose cost grows as n·log n.
const smallWord = 48

// merge applies the BPE merges to syms in place (HF semantics: repeatedly merge the adjacent
// pair with the lowest rank, the leftmost one among equal ranks) and returns the result.
func (mt mergeTable) merge(syms []int32) []int32 {
	if len(syms) > smallWord {
		return mt.mergeHeap(syms)
	}
	return mt.mergeScan(syms)
}

// mergeScan is merge by a quadratic scan for the best pair, whatever the length of syms.
func (mt mergeTable) mergeScan(syms []int32) []int32 {
	for len(syms) > 1 {
		best, pos := uint64(1<<64-1), -1
		for j := 0; j+1 < len(syms); j++ {
			if v, ok := mt[pairKey(syms[j], syms[j+1])]; ok && v < best {
				best, pos = v, j
			}
		}
		if pos < 0 {
			break
		}
		syms[pos] = int32(uint32(best))
		syms = append(syms[:pos+1], syms[pos+2:]...)
	}
	return syms
}

// mergeCand is a queued merge of the symbol at pos with its right neighbour.
type mergeCand struct {
	rank, pos int
	id        int32 // merged id
}

type candHeap []mergeCand

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(mergeCand)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeHeap is merge for long words: a linked list of symbols and a priority queue of
// candidate merges ordered by (rank, position), as HF's BPE word merging does.
func (mt mergeTable) mergeHeap(syms []int32) []int32 {
	n := len(syms)
	prev := make([]int, n)
	next := make([]int, n)
	alive := make([]bool, n)
	for i := range syms {
		prev[i], next[i], alive[i] = i-1, i+1, true
	}
	next[n-1] = -1
	h := make(candHeap, 0, n)
	push := func(i int) {
		j := next[i]
		if j < 0 {
			return
		}
		if v, ok := mt[pairKey(syms[i], syms[j])]; ok {
			h = append(h, mergeCand{rank: int(v >> 32), pos: i, id: int32(uint32(v))})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(i)
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := heap.Pop(&h).(mergeCand)
		i := c.pos
		j := next[i]
		if !alive[i] || j < 0 {
			continue
		}
		// Stale-entry test as in HF (word.rs): the current pair must still merge into
		// the queued id.
		if v, ok := mt[pairKey(syms[i], syms[j])]; !ok || int32(uint32(v)) != c.id {
			continue
		}
		syms[i] = c.id
		alive[j] = false
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		if p := prev[i]; p >= 0 {
			if v, ok := mt[pairKey(syms[p], syms[i])]; ok {
				heap.Push(&h, mergeCand{rank: int(v >> 32), pos: p, id: int32(uint32(v))})
			}
		}
		if k := next[i]; k >= 0 {
			if v, ok := mt[pairKey(syms[i], syms[k])]; ok {
				heap.Push(&h, mergeCand{rank: int(v >> 32), pos: i, id: int32(uint32(v))})
			}
		}
	}
	out := syms[:0]
	for i := 0; i >= 0 && i < n; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

// wordCache memoises the BPE ids of pre-token byte strings. It is sharded to keep lock
// contention low under EncodeBatch; a shard that reaches its capacity is emptied.
type wordCache struct {
	shards [cacheShards]cacheShard
}

const (
	cacheShards   = 64
	cacheShardCap = 1 << 13 // entries per shard (512 Ki words in all)
	cacheMaxWord  = 256     // longer pre-tokens are not cached (bytes)
)

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func shardOf(w string) int {
	// FNV-1a over at most the first 16 bytes and the length.
	h := uint32(2166136261) ^ uint32(len(w))
	for i := 0; i < len(w) && i < 16; i++ {
		h ^= uint32(w[i])
		h *= 16777619
	}
	return int(h % cacheShards)
}

func (c *wordCache) get(w string) ([]int32, bool) {
	s := &c.shards[shardOf(w)]
	s.mu.RLock()
	v, ok := s.m[w]
	s.mu.RUnlock()
	return v, ok
}

func (c *wordCache) put(w string, ids []int32) {
	s := &c.shards[shardOf(w)]
	s.mu.Lock()
	if s.m == nil || len(s.m) >= cacheShardCap {
		s.m = make(map[string][]int32, 256)
	}
	s.m[w] = ids
	s.mu.Unlock()
}
