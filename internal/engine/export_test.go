package engine

// KeptRows is how many rows the row store holds (for the tests over the
// built-in collectors, in package engine_test).
func (x *Exporter) KeptRows() int {
	x.store.mu.Lock()
	defer x.store.mu.Unlock()
	n := 0
	for _, set := range x.store.sets {
		n += len(set.rows)
	}
	return n
}
