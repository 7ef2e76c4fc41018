package group

import (
	"cmp"
	"slices"
	"strings"

	"github.com/chatpulse/chatpulse/aggregator"
)

// Merging the views of partitions into the group's. Each event is counted
// by two partitions: the one its room hashes to (the room stage) and the
// one its user hashes to (the user stage), each a full aggregator of the
// events it was given. Rooms are disjoint across room stages and users
// across user stages, so:
//
//   - what is about rooms (messages, series, active rooms, top rooms, the
//     rooms list, one room's view, and the joins and leaves with their
//     series of docs/contract.md section 12) is read from the room stages: sums, and
//     the top of the union of each one's top (exact: a room's whole count
//     lives in one partition);
//   - what is about users (distinct users, top users, one user's view) is
//     read from the user stages, the same way.
//
// No count of one key is ever split across partitions, which is what makes
// merging top-k lists exact here (where merging the top-k of counts split
// across shards is not).
//
// Every partial that counts anything must have been read at the same
// as_of: the caller asks again, at the latest, those that answered
// earlier. (A partial of nothing, all zeros, may be older.)

// alignAsOf is the as_of at which a view's answers, asked at now, are
// merged: the latest of now and theirs, leaving out those later than
// limit (so that one member whose clock runs fast cannot carry the
// group's views into its future). It returns the answers that can be
// read at it (over counts the partitions of those read later, which
// cannot: they are missing) and the partitions of those read earlier, to
// be asked again at it.
func alignAsOf(answers []answer, now, limit int64) (t int64, keep []answer, again []int, over int) {
	t = min(now, limit)
	for _, a := range answers {
		if len(a.Parts) > 0 && a.AsOf <= limit {
			t = max(t, a.AsOf)
		}
	}
	for _, a := range answers {
		switch {
		case len(a.Parts) > 0 && a.AsOf > t:
			over += len(a.Parts)
			continue
		case len(a.Parts) > 0 && a.AsOf < t:
			again = append(again, a.Parts...)
		}
		keep = append(keep, a)
	}
	return t, keep, again, over
}

// mergeOverview merges overviews: rooms' parts from rooms, users' parts
// from users (the same slice, when each partial already merged both), of a
// window of the given seconds.
func mergeOverview(rooms, users []aggregator.Overview, k int, seconds float64) aggregator.Overview {
	var v aggregator.Overview
	for i, o := range rooms {
		if i == 0 {
			v.Window, v.Series, v.SeriesJoins = o.Window, make([]int64, len(o.Series)), make([]int64, len(o.SeriesJoins))
		}
		v.AsOf = max(v.AsOf, o.AsOf)
		v.Messages += o.Messages
		v.ActiveRooms += o.ActiveRooms
		v.Joins += o.Joins
		v.Leaves += o.Leaves
		addSeries(v.Series, o.Series)
		addSeries(v.SeriesJoins, o.SeriesJoins)
		v.TopRooms = append(v.TopRooms, o.TopRooms...)
	}
	for _, o := range users {
		v.DistinctUsers += o.DistinctUsers
		v.TopUsers = append(v.TopUsers, o.TopUsers...)
	}
	v.Rate = float64(v.Messages) / seconds
	v.TopRooms = top(v.TopRooms, k, func(r aggregator.RoomCount) (int64, string) { return r.Messages, r.Room })
	v.TopUsers = top(v.TopUsers, k, talkerKey)
	if v.TopRooms == nil {
		v.TopRooms = []aggregator.RoomCount{}
	}
	if v.TopUsers == nil {
		v.TopUsers = []aggregator.Talker{}
	}
	if len(v.TopUsers) > 0 {
		t := v.TopUsers[0]
		v.TopTalker = &t
	}
	return v
}

// mergeRooms merges rooms lists of disjoint rooms.
func mergeRooms(parts []aggregator.Rooms, limit int) aggregator.Rooms {
	var v aggregator.Rooms
	for i, r := range parts {
		if i == 0 {
			v.Window = r.Window
		}
		v.AsOf = max(v.AsOf, r.AsOf)
		v.Rooms = append(v.Rooms, r.Rooms...)
	}
	v.Rooms = top(v.Rooms, limit, func(r aggregator.RoomSummary) (int64, string) { return r.Messages, r.Room })
	if v.Rooms == nil {
		v.Rooms = []aggregator.RoomSummary{}
	}
	return v
}

// addSeries adds a partial's series to the sum's, bucket by bucket.
func addSeries(sum, part []int64) {
	for b, n := range part {
		sum[b] += n
	}
}

func talkerKey(t aggregator.Talker) (int64, string) { return t.Messages, t.User }

// top sorts items as every ranking of the contract does (more messages
// first, then the smaller name, bytewise) and keeps the first k.
func top[T any](items []T, k int, key func(T) (int64, string)) []T {
	slices.SortFunc(items, func(a, b T) int {
		na, sa := key(a)
		nb, sb := key(b)
		return cmp.Or(cmp.Compare(nb, na), strings.Compare(sa, sb))
	})
	return items[:min(k, len(items))]
}
