// Package fleetsim simulates a fleet of machines running the metal agent, in one process on
// loopback, for the scale benchmark (bench fleet) and the chaos tests. Each simulated
// machine does what a real one does, through the real agent code: it "PXE-boots" by
// fetching its iPXE boot script from the provider over HTTP (GET
// <provider>/ipxe/boot.ipxe?uuid=…&mac=…&arch=x86_64&platform=efi), and when the script
// boots the agent it reads the provider endpoint, CA fingerprint, machine ID and per-boot
// token from the script's kernel line and runs the agent's own session
// (agent/internal/session: TLS pinned to the provider CA, Hello with the token, inventory,
// order results, reconnects with the agent's backoff) and order executor
// (agent/internal/orders), with simulated actions: a wipe takes a configured time and
// reports every disk erased; a reboot, a power-off and a kexec end the agent.
//
// # Machines
//
// Machine i (0 ≤ i < -n, offset by -first) of seed s is derived from sha256("fleetsim/<s>/<i>"):
// its SMBIOS UUID (version-4 form, lower case: also its machine ID), its serial number, 2–4
// NICs with locally administered MACs (02:…; the first is the one it boots from), 1–8 disks
// (NVMe, SATA SSD, SAS HDD; sizes and serials vary) and a hardware profile taken from
// go-smbios' fixtures (Dell, SuperMicro, ASRock, …: processors, memory modules, vendor),
// so the same seed gives the same fleet. The "machine" events at start list them all.
//
// What a machine does after a boot script, by what the script says:
//   - the agent (anvil.token= on its kernel line): agent session, until an order ends it;
//   - Talos (talos.config= on its kernel line) or its disk (exit, sanboot, HTTP 404): the
//     machine runs "Talos" and says nothing more until its power is cycled;
//   - anything else, or no answer (provider down): fetched again after -boot-retry, as
//     iPXE's retry loop does.
//
// A reboot order (or a power cycle through the power API) makes the machine boot again
// after -reboot-delay: new boot script, new token, new agent (its executor's memory of
// orders is lost, as a real machine's is). A kexec order loads (nothing is downloaded),
// reports done and jumps: the machine runs "Talos" (event "talos"). A power-off order or a
// power API "off" turns it off until a power API "on"/"cycle" or a "poweron" command.
//
// # Flags (agent/cmd/fleetsim)
//
//	-provider URL        the provider's HTTP base, http://127.0.0.1:PORT (required)
//	-n N                 machines (default 100); -first I: index of the first (default 0)
//	-seed S              identity seed (default 1)
//	-boot-concurrency C  boot-script fetches at once when powering on (default 256)
//	-boot-retry D        wait before fetching a boot script again (default 2s)
//	-reboot-delay D      firmware time between a reboot and its boot-script fetch (default 1s)
//	-wipe-fast D         simulated duration of a fast wipe (default 2s)
//	-wipe-zeroes D       of a zeroes wipe (default 30s); -wipe-secure D of a secure erase (default 10s)
//	-kexec               agents offer kexec (default true; false: they say why not)
//	-talos-chain         fetch the kernel a Talos script boots (the Image Factory's without
//	                     the provider's cache), as iPXE does; when that fails the boot is
//	                     "retry" (with its error), the provider's script fetched again after
//	                     -boot-retry (default false)
//	-bmc-address A       BMC LAN address reported to get/set BMC orders (default 127.0.0.1)
//	-bmc-port P          its port (default 623)
//	-listen ADDR         the HTTP power API (internal/powerwire) for every simulated
//	                     machine and the status endpoint (default 127.0.0.1:0)
//	-smbios-dir DIR      go-smbios' testdata (default: found in the Go module cache)
//	-log-level L         the agents' own log, on stderr (default error)
//
// # Events: stdout, one JSON object per line
//
// Every event has "time" (RFC 3339, nanoseconds, UTC) and "event"; machine events have
// "machine" (the UUID) and "index". Other fields, omitted when empty:
//
//	listening       {address}                       first line: the power API and status endpoint
//	machine         {mac, serial, disks, nics}      one per machine at start, before any boot
//	boot-script     {boot, mac, decision, status, error}
//	                boot counts the machine's boots from 1; decision is agent, talos, disk,
//	                retry (provider down or no usable script) — one per fetch
//	registered      {boot, session}                 after each Welcome; session counts the
//	                sessions of this boot from 1 (> 1: a reconnect)
//	session-closed  {boot, session, error}          the session ended (provider gone, refused, …)
//	order-received  {boot, order, kind, wipe, mode} an order arrived; kind is hold, release,
//	                wipe, reboot, power-off, kexec, bmc-get, bmc-set; wipe and mode for wipes
//	order-started   {boot, order, kind, wipe, mode} the executor began carrying it out (not sent
//	                for hold and release: they do nothing); an order already seen in this boot
//	                is never started again
//	order-done      {boot, order, kind, status, message, wipe, disks}
//	                status done or failed; disks counts the disks a wipe reported
//	rebooting       {boot, by}                      by: order, power-api, control
//	talos           {boot, via}                     via: kexec, pxe, disk
//	power           {state, by}                     state on or off; by: order, power-api, control
//	control         {cmd, error}                    a stdin command was carried out (or why not)
//	summary         {counts}                        last line, at exit: events by kind
//
// # Controls: stdin, one command per line
//
//	cut <machine>        network cut: the session drops now and cannot reconnect; the order
//	                     in flight keeps running (as on a real machine)
//	restore <machine>    the network is back: the agent reconnects with its backoff
//	powercut <machine>   power lost: the agent is gone at once, the order in flight abandoned,
//	                     no result sent, the executor's memory lost
//	poweron <machine>    power back (or on): the machine boots again
//	reboot <machine>     a warm reboot: the agent stops, the machine boots again
//
// <machine> is the UUID or "#<index>". Each command is acknowledged with a "control" event.
//
// # The power API and status
//
// -listen serves internal/powerwire's API for every machine at /machines/<uuid>/power and
// /boot (give the provider a machine's BMC as kind "api", address http://<listen>), so the
// provider can cycle, power off and on simulated machines as it does lab machines;
// GET /status answers {"machines", "on", "sessions", "states": {state: count}} and
// GET /machines each machine's {index, machine, state, boot, session, connected}.
//
// # Scale
//
// Each agent has its own gRPC ClientConn and TLS session, as real agents do: the provider
// cannot tell them apart, and its per-connection costs are measured honestly. The boot
// script fetches share one HTTP client (firmware would use a connection each; that cost is
// the PXE storm benchmark's, not this one's). Inventories are encoded once per machine and
// kept.
package fleetsim
