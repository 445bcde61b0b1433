"""Tests of server/gateway/transport/."""
