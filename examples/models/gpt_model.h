#ifndef GPT_MODEL_H
#define GPT_MODEL_H
#endif
