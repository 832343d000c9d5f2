package stats

// HoldsReadBuffer says whether p keeps a read buffer (it should only while
// a round runs).
func (p *Provider) HoldsReadBuffer() bool { return p.r.buf != nil }
