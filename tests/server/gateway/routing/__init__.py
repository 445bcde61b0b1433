"""Tests of server/gateway/routing/."""
