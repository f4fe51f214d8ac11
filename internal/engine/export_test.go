package engine

// KeptRuns is how many collectors' families the text cache holds (for the
// tests over the built-in collectors, in package engine_test).
func (x *Exporter) KeptRuns() int {
	x.text.mu.Lock()
	defer x.text.mu.Unlock()
	return len(x.text.done)
}
