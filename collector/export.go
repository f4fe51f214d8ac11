package collector

// For collectors outside this package (the node agent's, in
// internal/nodecollector), whose families the metrics reference lists
// beside the exporter's.

// Metric types of a Def.
const (
	TypeGauge   = typeGauge
	TypeCounter = typeCounter
)

// NewDef describes a family: text is the HELP line, or the HELP line, a
// NUL and the reference's guidance.
func NewDef(name, typ, text string, labels ...string) *Def {
	return newDefSplit(name, typ, text, labels...)
}

// Liveness marks a family only a running process serves.
func (d *Def) Liveness() *Def { return d.live() }
