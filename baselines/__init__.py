"""Methods HyFDCA is compared against (FedAvg, HyFEM, FLIC, APFed, CHFL). Empty until the
baselines issues land."""
