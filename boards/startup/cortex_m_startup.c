/* Kiln: minimal start-up code for a Cortex-M board (Armv7-M / Armv7E-M), with picolibc.
 *
 * Used for firmware flashed on a real board (the QEMU runs use picolibc's own semihosting
 * crt0 instead).  Linked with picolibc.ld and -nostartfiles: the vector table goes into
 * .text.init.enter, which picolibc.ld places first in flash (at the flash origin, where the
 * core reads the initial stack pointer and the reset vector).
 *
 * Reset: enable the FPU (when the firmware is built for one), copy .data from flash, zero
 * .bss, set up picolibc's thread-local storage (errno), run constructors, call main(),
 * then exit() with its status (a semihosting SYS_EXIT when a debugger with semihosting is
 * attached; without one the core stops in the fault handler below).  Built with
 * -DKILN_NO_HOST (make board OSLIB=dummyhost) for a board with no debugger: printf output
 * is dropped and exit() sleeps. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern uint8_t __stack[];
extern uint8_t __data_start[], __data_source[], __data_size[];
extern uint8_t __bss_start[], __bss_size[];
extern uint8_t __tls_base[];
extern void _set_tls(void *tls);
extern void __libc_init_array(void);
extern int main(void);

void _start(void);
void kiln_default_handler(void);

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)

void _start(void) {
#if defined(__ARM_FP)
  SCB_CPACR |= 0xFu << 20; /* CP10 and CP11: full access */
  __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
  memcpy(__data_start, __data_source, (size_t)(uintptr_t)__data_size);
  memset(__bss_start, 0, (size_t)(uintptr_t)__bss_size);
  _set_tls(__tls_base);
  __libc_init_array();
  exit(main());
}

#ifdef KILN_NO_HOST
/* picolibc's dummyhost has no _exit: with no host to report to, sleep forever (the
 * outputs stay in RAM, in kiln_output_*). */
void _exit(int status) {
  (void)status;
  for (;;) {
    __asm__ volatile("wfi");
  }
}
#endif

/* A fault or an unexpected interrupt: stop here, where a debugger sees it. */
void kiln_default_handler(void) {
  for (;;) {
    __asm__ volatile("bkpt #0");
  }
}

void NMI_Handler(void) __attribute__((weak, alias("kiln_default_handler")));
void HardFault_Handler(void) __attribute__((weak, alias("kiln_default_handler")));
void MemManage_Handler(void) __attribute__((weak, alias("kiln_default_handler")));
void BusFault_Handler(void) __attribute__((weak, alias("kiln_default_handler")));
void UsageFault_Handler(void) __attribute__((weak, alias("kiln_default_handler")));
void SVC_Handler(void) __attribute__((weak, alias("kiln_default_handler")));
void DebugMon_Handler(void) __attribute__((weak, alias("kiln_default_handler")));
void PendSV_Handler(void) __attribute__((weak, alias("kiln_default_handler")));
void SysTick_Handler(void) __attribute__((weak, alias("kiln_default_handler")));

typedef void (*kiln_vector)(void);

/* The 16 system vectors; the firmware enables no peripheral interrupt, so the device
 * vectors that follow on a real chip are never taken. */
__attribute__((section(".text.init.enter"), used, aligned(128)))
const kiln_vector kiln_vector_table[16] = {
  (kiln_vector)(uintptr_t)__stack, _start, NMI_Handler, HardFault_Handler, MemManage_Handler,
  BusFault_Handler, UsageFault_Handler, 0, 0, 0, 0, SVC_Handler, DebugMon_Handler, 0,
  PendSV_Handler, SysTick_Handler,
};
