"""MuJoCo tabletop world and simulated robot + camera driver."""
