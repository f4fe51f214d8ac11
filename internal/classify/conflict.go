package classify

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dra-exporter/dra-exporter/internal/index"
)

// Conflict is one claim (and pod) holding a device that another claim holds
// too, although the device is not shareable: the scheduler never allocates
// so, but a force-deleted pod's device can be prepared for a new claim
// before the old claim lets go (kubernetes #141471).
type Conflict struct {
	Device *index.Device
	Claim  *index.Claim
	// Pod and PodUID are a pod the claim is reserved for; empty when it
	// reserves none.
	Pod    string
	PodUID types.UID
	// Others are the other claims holding the device, as namespace/name.
	Others []string
}

// DoubleAllocations finds the published, non-shareable devices allocated to
// more than one claim. Admin-access allocations (monitoring agents) do not
// hold a device; shareable devices (allowMultipleAllocations) may be
// allocated many times; a device no current slice publishes is left out
// (whether it may be shared is unknown).
func DoubleAllocations(s *index.Snapshot) []Conflict {
	var out []Conflict
	for _, d := range s.Devices {
		if d.Shareable {
			continue
		}
		allocated := s.AllocatedTo(d.Key)
		if len(allocated) < 2 {
			continue
		}
		holders := distinctClaims(allocated)
		if len(holders) < 2 {
			continue
		}
		names := make([]string, len(holders))
		for i, c := range holders {
			names[i] = c.Key.String()
		}
		slices.Sort(names)
		for _, c := range holders {
			others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == c.Key.String() })
			pods := 0
			for _, r := range c.Obj.Status.ReservedFor {
				if r.Resource != "pods" || r.APIGroup != "" {
					continue
				}
				pods++
				out = append(out, Conflict{Device: d, Claim: c, Pod: r.Name, PodUID: r.UID, Others: others})
			}
			if pods == 0 {
				out = append(out, Conflict{Device: d, Claim: c, Others: others})
			}
		}
	}
	slices.SortFunc(out, func(a, b Conflict) int {
		if c := strings.Compare(a.Device.Key.String(), b.Device.Key.String()); c != 0 {
			return c
		}
		if c := strings.Compare(a.Claim.Key.String(), b.Claim.Key.String()); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	return out
}

// distinctClaims drops repeats: a claim whose results name one device twice
// holds it once.
func distinctClaims(claims []*index.Claim) []*index.Claim {
	var out []*index.Claim
	for _, c := range claims {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}
