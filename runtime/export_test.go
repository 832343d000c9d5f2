package runtime

import "context"

// Relist runs one relist of all pods, as Run does every RelistPeriod, for
// the tests outside the package that drive the PLEG step by step.
func (p *PLEG) Relist(ctx context.Context) { p.relist(ctx) }
