package agent

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"go.uber.org/fx"

	"github.com/nodekit/nodekit"
)

// errHelp is what ParseFlags returns for --help.
var errHelp = pflag.ErrHelp

func nodekitVersion() string { return nodekit.Version }

// reportFlagError prints a command-line error and the flags' usage, and
// returns exit code 2.
func reportFlagError(err error) int {
	fmt.Fprintf(os.Stderr, "nodeagent: %v\n\nFlags:\n%s", err, FlagUsage())
	return 2
}

// runApp starts app, waits for a signal or a shutdown and stops it,
// returning the exit code.
func runApp(logger logr.Logger, app *fx.App) int {
	if err := app.Err(); err != nil {
		logger.Error(err, "Cannot build the agent")
		return 1
	}
	startCtx, cancel := context.WithTimeout(context.Background(), app.StartTimeout())
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		logger.Error(err, "Cannot start the agent")
		return 1
	}
	sig := <-app.Wait()
	stopCtx, cancelStop := context.WithTimeout(context.Background(), app.StopTimeout())
	defer cancelStop()
	if err := app.Stop(stopCtx); err != nil {
		logger.Error(err, "Agent did not stop cleanly")
		return 1
	}
	logger.Info("Agent stopped", "signal", sig.Signal, "exitCode", sig.ExitCode)
	return sig.ExitCode
}
