"""The kernel: errors that steer a flow, durations, CRC32C. Imports nothing of Lifeboat's."""
