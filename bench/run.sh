#!/bin/sh
# Builds the provider and runs Anvil's benchmarks against their peers (root; perfdhcp from
# kea-admin, dnsmasq, nginx, wrk, atftpd). Usage:
# bench/run.sh [flags] [dhcp|http|power|wipe|storm|assets|tftp|fleet|fleet-etcd|all]
# (default all; flags: go run ./bench/cmd/bench -h). Report: _out/bench/report.txt.
set -eu
cd "$(dirname "$0")/.."
go build -o _out/bin/provider ./provider/cmd/provider
go build -o _out/bin/ipmi-sweep ./provider/cmd/ipmi-sweep
go build -o _out/bin/wipe-disk ./agent/internal/wipe/cmd/wipe-disk
go build -o _out/bin/fleetsim ./agent/cmd/fleetsim
go build -o _out/bin/bench ./bench/cmd/bench
last=""
for a in "$@"; do last=$a; done
case "$last" in
dhcp | http | power | wipe | storm | assets | tftp | fleet | fleet-etcd | all) exec _out/bin/bench "$@" ;;
*) exec _out/bin/bench "$@" all ;;
esac
