package pluginmanager_test

import (
	"context"
	"fmt"
	"os"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodekit/nodekit/pluginmanager"
)

// printHandler prints the plugins it is given.
type printHandler struct{}

func (printHandler) ValidatePlugin(_ context.Context, name, endpoint string, versions []string) error {
	return nil
}

func (printHandler) RegisterPlugin(_ context.Context, name, endpoint string, _ []string, _ *time.Duration) error {
	fmt.Println("registered", name, "at", endpoint)
	return nil
}

func (printHandler) DeRegisterPlugin(_ context.Context, name, _ string) {
	fmt.Println("de-registered", name)
}

// Example runs a Manager without fx on a registration directory, giving
// CSI plugins to a handler of its own.
func Example() {
	dir, err := os.MkdirTemp("", "plugins_registry")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	m, err := pluginmanager.New(pluginmanager.Options{
		Dir:      dir,
		Handlers: map[string]pluginmanager.Handler{registerapi.CSIPlugin: printHandler{}},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// Run returns when ctx is done; a plugin binding <dir>/<name>-reg.sock
	// meanwhile would be registered with printHandler.
	fmt.Println(m.Run(ctx))
	// Output: <nil>
}
