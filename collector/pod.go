package collector

import (
	"time"

	"github.com/dra-exporter/dra-exporter/internal/engine"
	"github.com/dra-exporter/dra-exporter/internal/family"
	"github.com/dra-exporter/dra-exporter/internal/index"
)

var podInfo = family.New("dra_pod_info", family.TypeGauge,
	"A pod that gets GPUs through a lane, with the node it is bound to.",
	"namespace", "pod", "pod_uid", "node", "lane").
	WithDoc("lane is dra, dra-extended or device-plugin; node is empty while Pending. Finished pods are left out. Always 1.")

type podCollector struct {
	labelKeys []string
	labels    *family.Def
}

// NewPodCollector exports GPU pods and, for the allowlisted label keys
// only, their labels as dra_pod_labels{label_<key>}.
func NewPodCollector(labelKeys []string) engine.Collector {
	c := &podCollector{}
	names := []string{"namespace", "pod", "pod_uid"}
	seen := map[string]bool{}
	for _, k := range labelKeys {
		name := "label_" + sanitizeLabel(k)
		if seen[name] {
			continue
		}
		seen[name] = true
		c.labelKeys = append(c.labelKeys, k)
		names = append(names, name)
	}
	if len(c.labelKeys) > 0 {
		c.labels = family.New("dra_pod_labels", family.TypeGauge,
			"Allowlisted labels of GPU pods, as label_<key>.", names...).
			WithDoc("Only the keys --pod.labels-allowlist names. Always 1.")
	}
	return c
}

func sanitizeLabel(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch == '_' || ch >= '0' && ch <= '9' && i > 0) {
			b[i] = '_'
		}
	}
	return string(b)
}

func (c *podCollector) Name() string { return "pod" }

func (c *podCollector) Defs() []*family.Def {
	if c.labels == nil {
		return []*family.Def{podInfo}
	}
	return []*family.Def{podInfo, c.labels}
}

func (c *podCollector) Update(s *index.Snapshot, now time.Time, e *family.Emitter) error {
	engine.UpdateRows(c, s, now, e)
	return nil
}

// EachRow: a row per pod that has not finished (empty for a pod of no
// lane), which reads its lane: the classes serving its extended resources (FanOut).
func (c *podCollector) EachRow(s *index.Snapshot, _ time.Time, rows *engine.Rows) {
	for _, p := range s.Pods {
		c.row(s, p, rows)
	}
}

// RowsOf (engine.Partial) is EachRow over some pods.
func (c *podCollector) RowsOf(s *index.Snapshot, _ time.Time, objs []any, rows *engine.Rows) {
	for _, o := range objs {
		c.row(s, o.(*index.Pod), rows)
	}
}

func (c *podCollector) row(s *index.Snapshot, p *index.Pod, rows *engine.Rows) {
	if p.Terminal() {
		return
	}
	e := rows.Row(p)
	if e == nil {
		return
	}
	lane := s.PodLane(p)
	if lane == "" {
		return
	}
	ns, name, uid := p.Key.Namespace, p.Key.Name, string(p.UID)
	e.Gauge(podInfo, 1, ns, name, uid, p.Obj.Spec.NodeName, lane)
	if c.labels != nil {
		// A slice of its own per series: the emitter keeps it.
		lvs := append(make([]string, 0, 3+len(c.labelKeys)), ns, name, uid)
		for _, k := range c.labelKeys {
			lvs = append(lvs, p.Obj.Labels[k])
		}
		e.Gauge(c.labels, 1, lvs...)
	}
}
