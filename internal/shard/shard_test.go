package shard

import (
	"fmt"
	"strings"
	"testing"
)

func TestOfIsFNV1aModTotal(t *testing.T) {
	// Pinned: a change of hash moves namespaces between running shards,
	// and the chart and docs promise this one.
	for _, tc := range []struct {
		ns    string
		total int
		want  int
	}{
		{"", 3, 2166136261 % 3}, // the FNV-1a offset basis
		{"default", 3, 2470140894 % 3},
		{"kube-system", 3, 2725615454 % 3},
		{"team-a", 3, 651916246 % 3},
		{"team-a", 7, 651916246 % 7},
		{"team-a", 1, 0},
	} {
		s := Shard{Index: 0, Total: tc.total}
		if got := s.Of(tc.ns); got != tc.want {
			t.Errorf("Of(%q) over %d = %d, want %d", tc.ns, tc.total, got, tc.want)
		}
	}
}

func TestEveryNamespaceHasExactlyOneOwner(t *testing.T) {
	for total := 1; total <= 7; total++ {
		counts := make([]int, total)
		for i := 0; i < 3000; i++ {
			ns := fmt.Sprintf("ns-%d", i)
			owners := 0
			for idx := 0; idx < total; idx++ {
				s, err := New(idx, total)
				if err != nil {
					t.Fatal(err)
				}
				if s.Owns(ns) {
					owners++
					counts[idx]++
				}
			}
			if owners != 1 {
				t.Fatalf("%s over %d shards has %d owners", ns, total, owners)
			}
		}
		for idx, n := range counts {
			// Spread: no shard gets less than half its fair share.
			if n < 3000/total/2 {
				t.Errorf("%d shards: shard %d owns only %d of 3000 namespaces", total, idx, n)
			}
		}
	}
}

func TestZeroValueIsUnsharded(t *testing.T) {
	var s Shard
	if s.Sharded() || !s.Owns("anything") || !s.OwnsCluster() || s.String() != "unsharded" {
		t.Errorf("zero Shard = %+v, want unsharded owning everything", s)
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		index, total int
		err          string
	}{
		{0, 1, ""},
		{2, 3, ""},
		{3, 3, "out of range"},
		{-1, 3, "out of range"},
		{0, 0, "at least 1"},
	} {
		_, err := New(tc.index, tc.total)
		if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("New(%d, %d) = %v, want error %q", tc.index, tc.total, err, tc.err)
		}
	}
}

func TestFromPodName(t *testing.T) {
	for _, tc := range []struct {
		pod   string
		total int
		want  int
		err   string
	}{
		{"dra-exporter-0", 3, 0, ""},
		{"dra-exporter-2", 3, 2, ""},
		{"my-release-dra-exporter-11", 12, 11, ""},
		{"dra-exporter-3", 3, 0, "out of range"},
		{"", 3, 0, "POD_NAME"},
		{"dra-exporter", 3, 0, "no trailing -<ordinal>"},
		{"dra-exporter-", 3, 0, "no trailing -<ordinal>"},
		{"dra-exporter-7d9f-x2b4q", 3, 0, "no trailing -<ordinal>"},
		{"dra-exporter-+1", 3, 0, "no trailing -<ordinal>"},
		{"exporter0", 3, 0, "no trailing -<ordinal>"},
	} {
		s, err := FromPodName(tc.pod, tc.total)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("FromPodName(%q, %d) = %v, %v; want error %q", tc.pod, tc.total, s, err, tc.err)
			}
			continue
		}
		if err != nil || s.Index != tc.want || s.Total != tc.total {
			t.Errorf("FromPodName(%q, %d) = %v, %v; want %d/%d", tc.pod, tc.total, s, err, tc.want, tc.total)
		}
	}
}

func TestWithAssignment(t *testing.T) {
	s, err := WithAssignment(1, 3, func(ns string) int { return len(ns) })
	if err != nil {
		t.Fatal(err)
	}
	if !s.Owns("a") || s.Owns("ab") || !s.Owns("abcd") {
		t.Errorf("assignment by length mod 3 not followed")
	}
}
