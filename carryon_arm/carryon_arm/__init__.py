"""CarryOn on a real arm: the arm adapter between the shield and your controllers."""
